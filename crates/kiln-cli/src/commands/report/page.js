// kiln report: the bar charts, the compiled steps table and the links between them and the
// graph. Every text from the program is set with textContent, never parsed as HTML.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var svg = document.getElementById("graph");
  var scroller = document.getElementById("graph-scroll");
  var BARS = 40;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function ms(x) {
    return x >= 100 ? x.toFixed(1) : x >= 1 ? x.toFixed(3) : x.toFixed(4);
  }
  function heat(t) {
    var stops = [[255, 247, 204], [254, 217, 118], [253, 141, 60], [227, 26, 28], [128, 0, 38]];
    t = Math.max(0, Math.min(1, t || 0)) * (stops.length - 1);
    var i = Math.min(Math.floor(t), stops.length - 2), f = t - i, c = [0, 1, 2].map(function (k) {
      return Math.round(stops[i][k] + (stops[i + 1][k] - stops[i][k]) * f);
    });
    return "rgb(" + c.join(",") + ")";
  }

  // Graph nodes by operator index.
  var nodes = {};
  svg.querySelectorAll("[data-op]").forEach(function (g) {
    (nodes[g.getAttribute("data-op")] = nodes[g.getAttribute("data-op")] || []).push(g);
  });

  // Highlighting: the operators of a hovered or pinned row, the rows of a hovered node.
  var pinned = null;
  var lit = [];
  function light(ops, rows) {
    lit.forEach(function (e) { e.classList.remove("hl"); });
    lit = [];
    (ops || []).forEach(function (o) {
      (nodes[o] || []).forEach(function (g) { g.classList.add("hl"); lit.push(g); });
    });
    (rows || []).forEach(function (r) { r.classList.add("hl"); lit.push(r); });
    svg.classList.toggle("dimmed", !!(ops && ops.length));
  }
  function restore() {
    if (pinned) light(pinned.ops, pinned.rows); else light(null, null);
  }
  function reveal(ops) {
    var g = ops.length ? (nodes[ops[0]] || [])[0] : null;
    if (!g) return;
    var box = g.getBoundingClientRect(), view = scroller.getBoundingClientRect();
    scroller.scrollBy({
      left: box.left + box.width / 2 - view.left - view.width / 2,
      top: box.top + box.height / 2 - view.top - view.height / 2,
      behavior: "smooth"
    });
  }
  function linkRow(row, ops) {
    row.addEventListener("mouseenter", function () { light(ops, [row]); });
    row.addEventListener("mouseleave", restore);
    row.addEventListener("click", function () {
      pinned = pinned && pinned.rows[0] === row ? null : { ops: ops, rows: [row] };
      restore();
      if (pinned) reveal(ops);
      if (ops.length === 1) info(ops[0]);
    });
  }

  // The details of one operator.
  var infoBox = document.getElementById("info");
  function info(o) {
    var op = data.ops[o];
    infoBox.textContent = "";
    infoBox.appendChild(el("div", "name", op.name));
    infoBox.appendChild(el("div", "", "chain " + op.chain + ", instruction " + op.instruction +
      " · " + ms(op.ms) + " ms per execute (" + op.share.toFixed(1) + "%) · compiled step" +
      (op.steps.length === 1 ? " " : "s ") + (op.steps.join(", ") || "none")));
    var list = el("ul");
    [["reads", op.reads], ["constant", op.constants], ["writes", op.writes]].forEach(function (p) {
      p[1].forEach(function (t) { list.appendChild(el("li", "", p[0] + " " + t)); });
    });
    infoBox.appendChild(list);
  }

  // Bar charts: per instruction and per operator name.
  function bars(rows) {
    var box = document.getElementById("bars");
    box.textContent = "";
    var top = rows.length ? rows[0].ms : 0;
    rows.slice(0, BARS).forEach(function (r) {
      var row = el("div", "bar");
      row.title = r.title;
      row.appendChild(el("span", "name", r.label));
      var track = row.appendChild(el("span", "track"));
      var fill = track.appendChild(el("span", "fill"));
      fill.style.display = "block";
      fill.style.width = (top > 0 ? (r.ms / top) * 100 : 0).toFixed(2) + "%";
      fill.style.background = heat(top > 0 ? r.ms / top : 0);
      row.appendChild(el("span", "value", ms(r.ms) + " ms " + r.share.toFixed(1) + "%"));
      linkRow(row, r.ops);
      box.appendChild(row);
    });
    if (rows.length > BARS) {
      box.appendChild(el("div", "note", (rows.length - BARS) + " more not shown"));
    }
  }
  var byInstruction = data.ops.map(function (op, i) {
    return {
      label: "#" + op.instruction + " " + op.name, title: op.name, ms: op.ms,
      share: op.share, ops: [i]
    };
  }).filter(function (r) { return r.ms > 0; });
  var kinds = {};
  data.ops.forEach(function (op, i) {
    var k = kinds[op.name] = kinds[op.name] || {
      label: op.name, title: op.name, ms: 0, share: 0, ops: []
    };
    k.ms += op.ms;
    k.share += op.share;
    k.ops.push(i);
  });
  var byName = Object.keys(kinds).map(function (k) {
    var r = kinds[k];
    r.label = r.label + " ×" + r.ops.length;
    return r;
  }).filter(function (r) { return r.ms > 0; });
  function byTime(a, b) { return b.ms - a.ms; }
  byInstruction.sort(byTime);
  byName.sort(byTime);
  document.querySelectorAll(".tabs button").forEach(function (b) {
    b.addEventListener("click", function () {
      document.querySelectorAll(".tabs button").forEach(function (x) {
        x.classList.toggle("on", x === b);
      });
      pinned = null;
      restore();
      bars(b.getAttribute("data-by") === "name" ? byName : byInstruction);
    });
  });
  bars(byInstruction);

  // The compiled steps.
  var tbody = document.getElementById("steps");
  var stepRows = data.steps.map(function (s, i) {
    var tr = el("tr", s.origins.length > 1 ? "fused" : "");
    var first = s.origins[0], last = s.origins[s.origins.length - 1];
    var origins = s.origins.length === 0 ? "" : s.origins.length === 1 ? String(first) :
      first + "–" + last + " (" + s.origins.length + ")";
    var how = [s.layout, s.algorithm].filter(function (x) { return x; }).join(", ");
    [[String(i), "num"], [s.kind, "kind"], [origins, "num"], [how, ""],
     [String(s.calls), "num"], [ms(s.ms), "num"], [s.share.toFixed(1) + "%", "num"]]
      .forEach(function (c) { tr.appendChild(el("td", c[1], c[0])); });
    tr.title = s.operators.join("\n");
    linkRow(tr, s.ops);
    tbody.appendChild(tr);
    return tr;
  });

  // Graph nodes: hover lights the steps that stand for the operator, click pins and shows it.
  Object.keys(nodes).forEach(function (o) {
    var rows = data.ops[o].steps.map(function (s) { return stepRows[s]; });
    nodes[o].forEach(function (g) {
      g.addEventListener("mouseenter", function () { light([o], rows); info(o); });
      g.addEventListener("mouseleave", restore);
      g.addEventListener("click", function (e) {
        e.stopPropagation();
        pinned = pinned && pinned.ops[0] === o ? null : { ops: [o], rows: rows };
        restore();
        if (rows.length) rows[0].scrollIntoView({ block: "nearest" });
      });
    });
  });

  // Zoom.
  var width = +svg.getAttribute("data-width"), height = +svg.getAttribute("data-height");
  var scale = 1;
  function zoom(s) {
    scale = Math.max(0.1, Math.min(4, s));
    svg.setAttribute("width", (width * scale).toFixed(0));
    svg.setAttribute("height", (height * scale).toFixed(0));
    document.getElementById("zoom").textContent = Math.round(scale * 100) + "%";
  }
  function fit() { zoom(Math.min(1, (scroller.clientWidth - 8) / width)); }
  document.getElementById("zoom-in").addEventListener("click", function () { zoom(scale * 1.25); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoom(scale / 1.25); });
  document.getElementById("zoom-fit").addEventListener("click", fit);
  document.getElementById("zoom-one").addEventListener("click", function () { zoom(1); });
  fit();

  var slowest = byInstruction.length ? byInstruction[0].ops[0] : null;
  if (slowest !== null) info(slowest);
  document.body.setAttribute("data-ready", "1");
})();
