set terminal pngcairo size 1400,560 font 'DejaVu Sans,10'
set output 'bench/plots/failover_kill.png'
set key bottom right
set grid
set yrange [0:1]
set ytics 0.1
set ylabel 'fraction of handovers'
set multiplot layout 1,2 title "Failover: leader process SIGKILLed — TTL 1000 ms, lock-delay 100 ms, etcd: lease TTL 1 s, lock-delay 0, etcdctl: lease TTL 60 s, 3-30 handovers per line"
set logscale x
set key top left
set xlabel 'handover latency (ms, log scale): end of the term -> next acquire() resolved'
set title 'from the SIGKILL: TTL lapse (1.5-2 x TTL) + lock-delay + acquisition (etcd: 2/3-1 x TTL + up to 0.5 s)'
plot 'bench/plots/gnuplot/kill_latency_http_3.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#1b9e77' title 'http, K=3', \
     'bench/plots/gnuplot/kill_latency_http_10.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#d95f02' title 'http, K=10', \
     'bench/plots/gnuplot/kill_latency_http_100.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#7570b3' title 'http, K=100', \
     'bench/plots/gnuplot/kill_latency_inproc_3.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#1b9e77' title 'inproc, K=3', \
     'bench/plots/gnuplot/kill_latency_inproc_10.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#d95f02' title 'inproc, K=10', \
     'bench/plots/gnuplot/kill_latency_inproc_100.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#7570b3' title 'inproc, K=100', \
     'bench/plots/gnuplot/kill_latency_etcd_3.dat' using 1:2 with steps lw 2 dt 4 lc rgb '#1b9e77' title 'etcd, K=3', \
     'bench/plots/gnuplot/kill_latency_etcd_10.dat' using 1:2 with steps lw 2 dt 4 lc rgb '#d95f02' title 'etcd, K=10', \
     'bench/plots/gnuplot/kill_latency_etcd_100.dat' using 1:2 with steps lw 2 dt 4 lc rgb '#7570b3' title 'etcd, K=100', \
     'bench/plots/gnuplot/kill_latency_etcdctl_3.dat' using 1:2 with steps lw 3 dt 3 lc rgb '#1b9e77' title 'etcdctl, K=3', \
     'bench/plots/gnuplot/kill_latency_etcdctl_10.dat' using 1:2 with steps lw 3 dt 3 lc rgb '#d95f02' title 'etcdctl, K=10', \
     'bench/plots/gnuplot/kill_latency_etcdctl_100.dat' using 1:2 with steps lw 3 dt 3 lc rgb '#7570b3' title 'etcdctl, K=100'
unset title
set title 'acquisition: overshoot past the end of the lock-delay'
set key bottom right
set logscale x
set xlabel 'ms from invalidation + lock-delay to the next acquire() resolved (log scale)'
plot 'bench/plots/gnuplot/kill_acquisition_http_3.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#1b9e77' title 'http, K=3', \
     'bench/plots/gnuplot/kill_acquisition_http_10.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#d95f02' title 'http, K=10', \
     'bench/plots/gnuplot/kill_acquisition_http_100.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#7570b3' title 'http, K=100', \
     'bench/plots/gnuplot/kill_acquisition_inproc_3.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#1b9e77' title 'inproc, K=3', \
     'bench/plots/gnuplot/kill_acquisition_inproc_10.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#d95f02' title 'inproc, K=10', \
     'bench/plots/gnuplot/kill_acquisition_inproc_100.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#7570b3' title 'inproc, K=100', \
     'bench/plots/gnuplot/kill_acquisition_etcd_3.dat' using 1:2 with steps lw 2 dt 4 lc rgb '#1b9e77' title 'etcd, K=3', \
     'bench/plots/gnuplot/kill_acquisition_etcd_10.dat' using 1:2 with steps lw 2 dt 4 lc rgb '#d95f02' title 'etcd, K=10', \
     'bench/plots/gnuplot/kill_acquisition_etcd_100.dat' using 1:2 with steps lw 2 dt 4 lc rgb '#7570b3' title 'etcd, K=100', \
     'bench/plots/gnuplot/kill_acquisition_etcdctl_3.dat' using 1:2 with steps lw 3 dt 3 lc rgb '#1b9e77' title 'etcdctl, K=3', \
     'bench/plots/gnuplot/kill_acquisition_etcdctl_10.dat' using 1:2 with steps lw 3 dt 3 lc rgb '#d95f02' title 'etcdctl, K=10', \
     'bench/plots/gnuplot/kill_acquisition_etcdctl_100.dat' using 1:2 with steps lw 3 dt 3 lc rgb '#7570b3' title 'etcdctl, K=100'
unset multiplot
