# Latency percentiles of every <dir>/*.hgrm (from `metronome jitter --hgrm <dir>`),
# HdrHistogram-style: x is 1/(1-percentile) on a log scale, so the tail is readable.
if (!exists("dir")) dir = 'results'
files = system('ls '.dir.'/*.hgrm')
set terminal pngcairo size 1000,600 noenhanced
set output dir.'/jitter.png'
set logscale x
set logscale y
set xtics ("50%%" 2, "90%%" 10, "99%%" 100, "99.9%%" 1000, "99.99%%" 10000)
set xlabel 'percentile'
set ylabel 'lateness (µs)'
set grid
set key top left
plot for [f in files] f using 4:1 every ::0 with lines lw 2 title system('basename '.f.' .hgrm')
