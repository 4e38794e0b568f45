/* hello.c: the smallest MPI program that needs its launcher's PMI: each rank
 * prints "hello rank=R size=S sum=X", X the sum of all ranks (an allreduce, so
 * the ranks found each other through what they exchanged over PMI). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("hello rank=%d size=%d sum=%d\n", rank, size, sum);
    MPI_Finalize();
    return 0;
}
