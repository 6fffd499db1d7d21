set terminal pngcairo size 1000,560 font 'DejaVu Sans,10'
set output 'bench/plots/failover_sem-clean.png'
set key bottom right
set grid
set yrange [0:1]
set ytics 0.1
set ylabel 'fraction of handovers'
set title "Failover: semaphore: a holder releases its permit — limit 2, K - 2 waiters parked, 20 handovers per line"
set logscale x
set xlabel 'permit handover (ms, log scale): release sent -> a waiter''s acquire() resolved'
plot 'bench/plots/gnuplot/sem-clean_latency_http_3.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#1b9e77' title 'http, K=3', \
     'bench/plots/gnuplot/sem-clean_latency_http_10.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#d95f02' title 'http, K=10', \
     'bench/plots/gnuplot/sem-clean_latency_inproc_3.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#1b9e77' title 'inproc, K=3', \
     'bench/plots/gnuplot/sem-clean_latency_inproc_10.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#d95f02' title 'inproc, K=10', \
     'bench/plots/gnuplot/sem-clean_latency_etcd_3.dat' using 1:2 with steps lw 2 dt 4 lc rgb '#1b9e77' title 'etcd, K=3', \
     'bench/plots/gnuplot/sem-clean_latency_etcd_10.dat' using 1:2 with steps lw 2 dt 4 lc rgb '#d95f02' title 'etcd, K=10'
