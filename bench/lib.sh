# Helpers shared by the bench/run_vs_*.sh scripts (sourced, not run).

# median: the median of the numbers on stdin, one per line (mean of the middle two for an even
# count); prints nothing for empty input.
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) exit; if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# ratio A B: A / B with 2 decimals, or "-" when either is missing or B is zero.
ratio() { awk -v a="${1:-}" -v b="${2:-}" 'BEGIN {if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f\n", a / b}'; }
