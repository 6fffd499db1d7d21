set terminal pngcairo size 1400,560 font 'DejaVu Sans,10'
set output 'bench/plots/failover_check-fail.png'
set key bottom right
set grid
set yrange [0:1]
set ytics 0.1
set ylabel 'fraction of handovers'
set multiplot layout 1,2 title "Failover: bound health check set critical — lock-delay 100 ms, 200 handovers per line"
set xlabel 'handover latency (ms): end of the term -> next acquire() resolved'
set title 'latency: detection + lock-delay + acquisition'
plot 'bench/plots/gnuplot/check-fail_latency_http_3.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#1b9e77' title 'http, K=3', \
     'bench/plots/gnuplot/check-fail_latency_http_10.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#d95f02' title 'http, K=10', \
     'bench/plots/gnuplot/check-fail_latency_http_100.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#7570b3' title 'http, K=100', \
     'bench/plots/gnuplot/check-fail_latency_inproc_3.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#1b9e77' title 'inproc, K=3', \
     'bench/plots/gnuplot/check-fail_latency_inproc_10.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#d95f02' title 'inproc, K=10', \
     'bench/plots/gnuplot/check-fail_latency_inproc_100.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#7570b3' title 'inproc, K=100'
unset title
set title 'acquisition: overshoot past the end of the lock-delay'
set key bottom right
set logscale x
set xlabel 'ms from invalidation + lock-delay to the next acquire() resolved (log scale)'
plot 'bench/plots/gnuplot/check-fail_acquisition_http_3.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#1b9e77' title 'http, K=3', \
     'bench/plots/gnuplot/check-fail_acquisition_http_10.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#d95f02' title 'http, K=10', \
     'bench/plots/gnuplot/check-fail_acquisition_http_100.dat' using 1:2 with steps lw 2 dt 1 lc rgb '#7570b3' title 'http, K=100', \
     'bench/plots/gnuplot/check-fail_acquisition_inproc_3.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#1b9e77' title 'inproc, K=3', \
     'bench/plots/gnuplot/check-fail_acquisition_inproc_10.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#d95f02' title 'inproc, K=10', \
     'bench/plots/gnuplot/check-fail_acquisition_inproc_100.dat' using 1:2 with steps lw 2 dt 2 lc rgb '#7570b3' title 'inproc, K=100'
unset multiplot
