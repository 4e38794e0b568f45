#!/bin/sh
# One Monte Carlo sample batch: estimates pi from 200,000 random points, seeded by the
# array index so every task draws different points. Run as an array:
#   saker run --array 1-100 -- examples/pi.sh {index}
seed=${1:?usage: pi.sh SEED}
awk -v seed="$seed" 'BEGIN {
    srand(seed); n = 200000; inside = 0
    for (i = 0; i < n; i++) { x = rand(); y = rand(); if (x*x + y*y <= 1) inside++ }
    printf "%d %d %.6f\n", seed, inside, 4 * inside / n
}'
