//! The activation layout of each convolution, max pooling, channel scale and global mean:
//! channels-last (NHWC) where a value passes only between them, NCHW everywhere else.
//!
//! A convolution's, max pooling's or channel scale's output is NHWC when every read of it
//! (aliases and method outputs count as reads) is a convolution's input or residual, a max
//! pooling's or channel scale's input or a mean over height and width (which reads either
//! layout), and every such reader, and its producer, can run with that layout. A convolution
//! can when [`PackedConv2d::supports`] its layouts: a pointwise convolution reads and writes
//! either layout, another one-group convolution reads NCHW and writes either, or runs NHWC to
//! NHWC, a depthwise one runs NHWC to NHWC when it has at least 16 channels, so does a grouped
//! one of a few channels per group, and a residual is laid out as its reader's output. A max
//! pooling runs when [`MaxPool2dArgs::supports`] its layouts: NCHW to NCHW or NHWC to NHWC;
//! so does a channel scale (a squeeze-excite block's `mul`, whose factors are the same bytes
//! in either layout). So a chain starts from the NCHW input of its first convolution, and its
//! last step writes NCHW for whatever reads it next: no conversion steps. No other step ever
//! sees an NHWC value.

use std::collections::{HashMap, HashSet};

use kiln_kernels::compute::conv2d::{Conv2dGeometry, PackedConv2d};
use kiln_kernels::pool::MaxPool2dArgs;

use super::graph::{Graph, NodeOp};
use super::nodes::ConvNode;
use super::prepared::conv_geometry;
use kiln_kernels::compute::conv2d::{Layout, Layouts};

/// Sets [`ConvNode::layouts`] of every convolution of `g`, and the layout of every max
/// pooling ([`MaxPoolNode::layout`](super::nodes::MaxPoolNode::layout)), channel scale
/// ([`ChannelScaleNode::layout`](super::nodes::ChannelScaleNode::layout)) and mean
/// ([`MeanNode::layout`](super::nodes::MeanNode::layout)).
pub(crate) fn choose_layouts(g: &mut Graph<'_>) {
    // A read through an alias with the same sizes at offset 0 (a 1-D convolution's output
    // reshaped to 3-D and back) reads the value it aliases, in its layout.
    let key = |v: u32| match g.root(v) {
        (root, 0) if root != v && g.sizes(root).is_some() && g.sizes(root) == g.sizes(v) => root,
        _ => v,
    };
    let convs: Vec<(usize, ConvNode, Conv2dGeometry)> = (0..g.nodes.len())
        .filter_map(|n| match &g.nodes[n].op {
            NodeOp::Conv(c) => {
                let geometry = conv_geometry(g, c).ok()?;
                let reads =
                    ConvNode { input: key(c.input), residual: c.residual.map(key), ..c.clone() };
                Some((n, reads, geometry))
            }
            _ => None,
        })
        .collect();
    let means: Vec<(usize, u32)> = (0..g.nodes.len())
        .filter_map(|n| match &g.nodes[n].op {
            NodeOp::Mean(m) => Some((n, key(m.input))),
            _ => None,
        })
        .collect();
    // Max poolings of 4-D activations: (node, input, output).
    let pools: Vec<(usize, u32, u32)> = (0..g.nodes.len())
        .filter_map(|n| match &g.nodes[n].op {
            NodeOp::MaxPool(m) if g.sizes(m.input).is_some_and(|s| s.len() == 4) => {
                Some((n, key(m.input), m.output))
            }
            _ => None,
        })
        .collect();
    // Channel scales: (node, input, output).
    let scales: Vec<(usize, u32, u32)> = (0..g.nodes.len())
        .filter_map(|n| match &g.nodes[n].op {
            NodeOp::ChannelScale(m) => Some((n, key(m.input), m.output)),
            _ => None,
        })
        .collect();
    // Reads by nodes that can take NHWC: convolutions (input, residual), max poolings, channel
    // scales (their input) and means.
    let mut layout_reads: HashMap<u32, u32> = HashMap::new();
    let read_values = convs
        .iter()
        .flat_map(|(_, c, _)| std::iter::once(c.input).chain(c.residual))
        .chain(pools.iter().chain(&scales).map(|&(_, x, _)| x))
        .chain(means.iter().map(|&(_, v)| v));
    for v in read_values {
        *layout_reads.entry(v).or_default() += 1;
    }
    // Outputs only such nodes read, then demoted until every convolution supports its
    // layouts and every max pooling its own (each pass only demotes, so this ends; a mean
    // reads either layout).
    let mut nhwc: HashSet<u32> = convs
        .iter()
        .map(|(_, c, _)| c.output)
        .chain(pools.iter().chain(&scales).map(|&(_, _, y)| y))
        .filter(|v| layout_reads.get(v).is_some_and(|&r| r == g.reads(*v)))
        .collect();
    let layout = |nhwc: &HashSet<u32>, v: u32| {
        if nhwc.contains(&v) {
            Layout::Nhwc
        } else {
            Layout::Nchw
        }
    };
    loop {
        let mut changed = false;
        for (_, c, geometry) in &convs {
            let l = Layouts { input: layout(&nhwc, c.input), output: layout(&nhwc, c.output) };
            let residual = c.residual.filter(|&r| layout(&nhwc, r) != l.output);
            if PackedConv2d::supports(geometry, l) && residual.is_none() {
                continue;
            }
            changed = true;
            if l.output == Layout::Nhwc {
                nhwc.remove(&c.output);
            } else if let Some(r) = residual {
                nhwc.remove(&r);
            } else {
                nhwc.remove(&c.input);
            }
        }
        for &(_, x, y) in &pools {
            let l = Layouts { input: layout(&nhwc, x), output: layout(&nhwc, y) };
            if !MaxPool2dArgs::supports(l) {
                changed = true;
                nhwc.remove(&x);
                nhwc.remove(&y);
            }
        }
        for &(_, x, y) in &scales {
            if layout(&nhwc, x) != layout(&nhwc, y) {
                changed = true;
                nhwc.remove(&x);
                nhwc.remove(&y);
            }
        }
        if !changed {
            break;
        }
    }
    for (n, c, _) in convs {
        if let NodeOp::Conv(node) = &mut g.nodes[n].op {
            node.layouts =
                Layouts { input: layout(&nhwc, c.input), output: layout(&nhwc, c.output) };
        }
    }
    for (n, x, _) in pools {
        if let NodeOp::MaxPool(node) = &mut g.nodes[n].op {
            node.layout = layout(&nhwc, x);
        }
    }
    for (n, x, _) in scales {
        if let NodeOp::ChannelScale(node) = &mut g.nodes[n].op {
            node.layout = layout(&nhwc, x);
        }
    }
    for (n, input) in means {
        if let NodeOp::Mean(node) = &mut g.nodes[n].op {
            node.layout = layout(&nhwc, input);
        }
    }
}
