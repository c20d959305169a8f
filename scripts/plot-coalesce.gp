# Lateness of every one-shot in a coalescing run (from `metronome coalesce --hgrm <dir>`),
# per backend, against the share of timers: a backend that coalesces spreads its firings
# over the leeway window (each batch fires when its last window closes), one that does
# not fires every timer at its deadline, each with a wake-up of its own.
if (!exists("dir")) dir = 'results/coalesce'
files = system('ls '.dir.'/*.hgrm')
set terminal pngcairo size 1000,600 noenhanced
set output dir.'/../coalesce.png'
set xlabel 'share of timers (%)'
set ylabel 'lateness (ms)'
set grid
set key top left
plot for [f in files] f using ($2*100):($1/1000) every ::0 with lines lw 2 title system('basename '.f.' .hgrm')
