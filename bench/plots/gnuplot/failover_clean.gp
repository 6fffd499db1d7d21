set terminal pngcairo size 1000,560 font 'DejaVu Sans,10'
set output 'bench/plots/failover_clean.png'
set key bottom right
set grid
set yrange [0:1]
set ytics 0.1
set ylabel 'fraction of handovers'
set title "Failover: clean release (?release=) / etcd: resign (delete the key) — lock-delay 0, etcd, etcdctl, 200 handovers per line"
set logscale x
set xlabel 'handover latency (ms, log scale): end of the term -> next acquire() resolved'
plot 'bench/plots/gnuplot/clean_latency_http_3.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#1b9e77' title 'http, K=3', \
     'bench/plots/gnuplot/clean_latency_http_10.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#d95f02' title 'http, K=10', \
     'bench/plots/gnuplot/clean_latency_http_100.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#7570b3' title 'http, K=100', \
     'bench/plots/gnuplot/clean_latency_inproc_3.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#1b9e77' title 'inproc, K=3', \
     'bench/plots/gnuplot/clean_latency_inproc_10.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#d95f02' title 'inproc, K=10', \
     'bench/plots/gnuplot/clean_latency_inproc_100.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#7570b3' title 'inproc, K=100', \
     'bench/plots/gnuplot/clean_latency_etcd_3.dat' using 1:2 with steps lw 2 dt 4 lc rgb '#1b9e77' title 'etcd, K=3', \
     'bench/plots/gnuplot/clean_latency_etcd_10.dat' using 1:2 with steps lw 2 dt 4 lc rgb '#d95f02' title 'etcd, K=10', \
     'bench/plots/gnuplot/clean_latency_etcd_100.dat' using 1:2 with steps lw 2 dt 4 lc rgb '#7570b3' title 'etcd, K=100', \
     'bench/plots/gnuplot/clean_latency_etcdctl_3.dat' using 1:2 with steps lw 3 dt 3 lc rgb '#1b9e77' title 'etcdctl, K=3', \
     'bench/plots/gnuplot/clean_latency_etcdctl_10.dat' using 1:2 with steps lw 3 dt 3 lc rgb '#d95f02' title 'etcdctl, K=10', \
     'bench/plots/gnuplot/clean_latency_etcdctl_100.dat' using 1:2 with steps lw 3 dt 3 lc rgb '#7570b3' title 'etcdctl, K=100'
