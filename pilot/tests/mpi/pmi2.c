/* pmi2.c: a PMI-2 client (Slurm's libpmi2, the library MVAPICH, Intel MPI and
 * Open MPI's s2 component load) run as the ranks of a Saker job with --mpi pmi.
 *
 * Each rank prints one line:
 *   pmi2 rank=R size=S jobid=J mapping=M cards=C node=N
 * where C counts the other ranks' keys it read after a fence (size - 1 when the
 * exchange works) and N is the node attribute the first rank of its node put and
 * every rank of the node read (waiting for it).
 *
 * Argument abort=<rank>: that rank calls PMI2_Abort after its fence.
 * Build: cc -O2 -Wall -o pmi2 pmi2.c -lpmi2 (Debian: libpmi2-0-dev).
 */
#include <slurm/pmi2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int spawned, size, rank, appnum, found = 0, len = 0, abort_rank = -1;
    char jobid[256] = "", mapping[PMI2_MAX_VALLEN + 1] = "", value[PMI2_MAX_VALLEN + 1];
    char key[PMI2_MAX_KEYLEN], mine[64], node[PMI2_MAX_VALLEN + 1] = "";

    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "abort=", 6) == 0)
            abort_rank = atoi(argv[i] + 6);
    if (PMI2_Init(&spawned, &size, &rank, &appnum) != PMI2_SUCCESS)
        return 10;
    if (PMI2_Job_GetId(jobid, sizeof jobid) != PMI2_SUCCESS)
        return 11;
    if (PMI2_Info_GetJobAttr("PMI_process_mapping", mapping, sizeof mapping, &found)
        != PMI2_SUCCESS || !found)
        return 12;
    /* A value with a ';' in it, which the wire doubles. */
    snprintf(key, sizeof key, "card-%d", rank);
    snprintf(mine, sizeof mine, "addr;%d", rank * 7);
    if (PMI2_KVS_Put(key, mine) != PMI2_SUCCESS || PMI2_KVS_Fence() != PMI2_SUCCESS)
        return 13;
    if (rank == abort_rank)
        PMI2_Abort(1, "pmi2 probe gives up");
    int cards = 0;
    for (int other = 0; other < size; other++) {
        char expected[64];
        if (other == rank)
            continue;
        snprintf(key, sizeof key, "card-%d", other);
        snprintf(expected, sizeof expected, "addr;%d", other * 7);
        if (PMI2_KVS_Get(jobid, PMI2_ID_NULL, key, value, sizeof value, &len) == PMI2_SUCCESS
            && strcmp(value, expected) == 0)
            cards++;
    }
    /* The first rank of each node (2 ranks a node) puts, the other waits for it. */
    if (rank % 2 == 0) {
        snprintf(value, sizeof value, "from-%d", rank);
        if (PMI2_Info_PutNodeAttr("saker-probe", value) != PMI2_SUCCESS)
            return 14;
    }
    if (PMI2_Info_GetNodeAttr("saker-probe", node, sizeof node, &found, 1) != PMI2_SUCCESS
        || !found)
        return 15;
    printf("pmi2 rank=%d size=%d jobid=%s mapping=%s cards=%d node=%s\n", rank, size, jobid,
           mapping, cards, node);
    fflush(stdout);
    if (PMI2_KVS_Fence() != PMI2_SUCCESS || PMI2_Finalize() != PMI2_SUCCESS)
        return 16;
    return 0;
}
