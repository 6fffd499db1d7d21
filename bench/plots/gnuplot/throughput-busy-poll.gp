set terminal pngcairo size 1300,520 font 'DejaVu Sans,10'
set output 'bench/plots/throughput-busy-poll.png'
set multiplot layout 1,2 title "Lock throughput: acquire()+release() cycles on one key, K candidates contending (10 s per point; idle vCPUs halt at once; bench and agent busy-poll 50us)"
set grid
set logscale x
set xlabel 'candidates K (log scale)'
set key top right
set ylabel 'cycles per second (all candidates together, log scale)'
set logscale y
set title 'throughput'
set arrow 1 from graph 0, first 20000 to graph 1, first 20000 nohead dt 3 lw 1.5 lc rgb '#444444'
set label 1 'goal over HTTP: 20,000/s' at graph 0.02, first 22500 tc rgb '#444444'
plot 'bench/plots/gnuplot/throughput-busy-poll.dat' index 0 using 1:2 with linespoints lw 2 pt 7 lc rgb '#d95f02' title 'http', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 1 using 1:2 with linespoints lw 2 pt 7 lc rgb '#7570b3' title 'http-retake', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 2 using 1:2 with linespoints lw 2 pt 7 lc rgb '#e6ab02' title 'unix', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 3 using 1:2 with linespoints lw 2 pt 7 lc rgb '#a6761d' title 'unix-retake', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 4 using 1:2 with linespoints lw 2 pt 7 lc rgb '#1b9e77' title 'inproc', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 5 using 1:2 with linespoints lw 2 pt 7 lc rgb '#e7298a' title 'inproc-retake'
unset arrow 1
unset label 1
set title 'time per cycle (acquire() call -> release answered)'
set ylabel 'ms per cycle (log scale)'
plot 'bench/plots/gnuplot/throughput-busy-poll.dat' index 0 using 1:3 with linespoints lw 2 pt 7 lc rgb '#d95f02' title 'http p50', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 0 using 1:4 with linespoints lw 1 dt 2 pt 6 lc rgb '#d95f02' title 'http p99', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 1 using 1:3 with linespoints lw 2 pt 7 lc rgb '#7570b3' title 'http-retake p50', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 1 using 1:4 with linespoints lw 1 dt 2 pt 6 lc rgb '#7570b3' title 'http-retake p99', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 2 using 1:3 with linespoints lw 2 pt 7 lc rgb '#e6ab02' title 'unix p50', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 2 using 1:4 with linespoints lw 1 dt 2 pt 6 lc rgb '#e6ab02' title 'unix p99', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 3 using 1:3 with linespoints lw 2 pt 7 lc rgb '#a6761d' title 'unix-retake p50', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 3 using 1:4 with linespoints lw 1 dt 2 pt 6 lc rgb '#a6761d' title 'unix-retake p99', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 4 using 1:3 with linespoints lw 2 pt 7 lc rgb '#1b9e77' title 'inproc p50', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 4 using 1:4 with linespoints lw 1 dt 2 pt 6 lc rgb '#1b9e77' title 'inproc p99', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 5 using 1:3 with linespoints lw 2 pt 7 lc rgb '#e7298a' title 'inproc-retake p50', 'bench/plots/gnuplot/throughput-busy-poll.dat' index 5 using 1:4 with linespoints lw 1 dt 2 pt 6 lc rgb '#e7298a' title 'inproc-retake p99'
unset multiplot
