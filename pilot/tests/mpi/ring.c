/* ring.c: a message size sweep around a ring of all ranks, for comparing how ranks
 * were started (Saker's agents serving PMI, srun, mpiexec) by what they compute and
 * how fast their messages go once wired up.
 *
 * For each size from 8 bytes to 4 MiB (x8), every rank sends a buffer to its right
 * neighbour and receives from its left, ITERS times; each rank adds its rank to the
 * buffer's words as it passes, so the checksum at the end says every hop happened.
 * Rank 0 prints one line per size:
 *   ring size=S iters=I seconds=T mibps=B sum=C
 * (B: MiB per second one link carries; C: the buffer's sum, the same whatever
 * launched the ranks) and "ring done".
 *
 * Build: mpicc.mpich -O2 -Wall -o ring ring.c
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (long bytes = 8; bytes <= (4L << 20); bytes *= 8) {
        long words = bytes / 8;
        int iters = bytes >= (1L << 20) ? 20 : 200;
        uint64_t *out = malloc(bytes), *in = malloc(bytes);
        for (long i = 0; i < words; i++)
            out[i] = (uint64_t)i;
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        for (int it = 0; it < iters; it++) {
            MPI_Sendrecv(out, (int)words, MPI_UINT64_T, right, 0, in, (int)words,
                         MPI_UINT64_T, left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (long i = 0; i < words; i++)
                out[i] = in[i] + (uint64_t)rank;
        }
        double seconds = MPI_Wtime() - start;
        uint64_t local = 0, sum = 0;
        for (long i = 0; i < words; i++)
            local += out[i];
        MPI_Reduce(&local, &sum, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double mibps = (double)bytes * iters / seconds / (1 << 20);
            printf("ring size=%ld iters=%d seconds=%.6f mibps=%.1f sum=%llu\n", bytes, iters,
                   seconds, mibps, (unsigned long long)sum);
            fflush(stdout);
        }
        free(out);
        free(in);
    }
    if (rank == 0)
        printf("ring done\n");
    MPI_Finalize();
    return 0;
}
