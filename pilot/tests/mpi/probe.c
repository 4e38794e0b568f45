/* probe.c: MPI smoke test for Saker's HPC job support.
 *
 * Each rank prints exactly one line:
 *   probe rank=R size=S host=H sum=X ring=T saker_rank=V saker_node=N init_ms=M
 *         init_unix_us=U
 * (U: wall clock when MPI_Init returned, for launch-time measurements across
 * processes; saker-perf's hpc rows read it.)
 * and rank 0 finally prints "probe done". Tests parse these lines: checking
 * size and sum (not only exit codes) catches launches that silently start N
 * singletons (each seeing size=1).
 *
 * Optional arguments (any order):
 *   fail=<rank>   that rank exits with status 3 right after MPI_Init, without
 *                 MPI_Finalize, to exercise the launcher's failure handling.
 *   sleep=<secs>  every rank sleeps after the ring, for cancel/kill tests.
 *   abort=<rank>  that rank calls MPI_Abort(MPI_COMM_WORLD, 7) after the
 *                 allreduce, while the others wait in the ring.
 *   out=<dir>     each rank also writes its line to <dir>/probe.<rank> (ranks
 *                 started by their agents keep their stdout per rank).
 *
 * Builds warning-free with `mpicc.openmpi -O2 -Wall` and `mpicc.mpich -O2 -Wall`.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    /* Taken before MPI_Init so init_ms includes the whole wire-up. */
    double t0 = now_ms();
    int fail_rank = -1, abort_rank = -1;
    double sleep_s = 0.0;
    const char *out_dir = NULL;

    MPI_Init(&argc, &argv);
    double init_ms = now_ms() - t0;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    long long init_unix_us = (long long)wall.tv_sec * 1000000LL + wall.tv_nsec / 1000;

    /* Parse after MPI_Init: some launchers/MPI_Init may rewrite argv. */
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "fail=", 5) == 0)
            fail_rank = atoi(argv[i] + 5);
        else if (strncmp(argv[i], "abort=", 6) == 0)
            abort_rank = atoi(argv[i] + 6);
        else if (strncmp(argv[i], "out=", 4) == 0)
            out_dir = argv[i] + 4;
        else if (strncmp(argv[i], "sleep=", 6) == 0)
            sleep_s = atof(argv[i] + 6);
    }

    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* Simulated crash: no MPI_Finalize, so the launcher must notice. */
    if (rank == fail_rank)
        exit(3);

    char host[256];
    if (gethostname(host, sizeof host) != 0)
        strcpy(host, "?");
    host[sizeof host - 1] = '\0';

    /* Collective: proves every rank joined the same world. */
    int one = rank + 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == abort_rank)
        MPI_Abort(MPI_COMM_WORLD, 7);

    /* Point-to-point ring: proves rank-to-rank transport works between
     * nodes (the collective alone might take a shortcut). Rank 0 expects
     * size-1 back. */
    int ring = -1;
    if (size > 1) {
        int token;
        if (rank == 0) {
            token = 0;
            MPI_Send(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_INT, size - 1, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            ring = token;
        } else {
            MPI_Recv(&token, 1, MPI_INT, rank - 1, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            token += 1;
            MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD);
        }
    }

    if (sleep_s > 0) {
        struct timespec ts = { (time_t)sleep_s,
                               (long)((sleep_s - (time_t)sleep_s) * 1e9) };
        nanosleep(&ts, NULL);
    }

    /* SAKER_NODE: which agent's slots the rank runs in (hosts repeat in local mode). */
    const char *saker_rank = getenv("SAKER_RANK");
    const char *saker_node = getenv("SAKER_NODE");
    char line[512];
    snprintf(line, sizeof line,
             "probe rank=%d size=%d host=%s sum=%d ring=%d saker_rank=%s saker_node=%s "
             "init_ms=%.3f init_unix_us=%lld\n",
             rank, size, host, sum, ring, saker_rank ? saker_rank : "-",
             saker_node ? saker_node : "-", init_ms, init_unix_us);
    fputs(line, stdout);
    fflush(stdout);
    if (out_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/probe.%d", out_dir, rank);
        FILE *file = fopen(path, "w");
        if (file) {
            fputs(line, file);
            fclose(file);
        }
    }

    /* Barrier so "probe done" comes after every rank has printed (ordering
     * across ranks' stdout streams is still up to the launcher). */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("probe done\n");
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
