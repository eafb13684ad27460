/* An MPI program whose results are checked, for tools/tests/openmpi.rs:
 *  - MPI_Allreduce (sum) of 64 Ki doubles, element i of rank r being
 *    r * 1000 + i: every rank checks every sum against its closed form;
 *  - MPI_Alltoall of 4 Ki ints per peer, element j sent by rank r to rank d
 *    being r * 1000000 + d * 10000 + j: every rank checks what it got from
 *    each peer;
 *  - point-to-point bandwidth: every rank sends MSGS messages of 1 MiB to
 *    its right neighbour while receiving as many from its left one
 *    (non-blocking, windows of WINDOW), every byte a function of the
 *    sender, the message and the offset, all of it checked; the rank
 *    prints its MB/s. `mpi_check ROUNDS` repeats this ROUNDS times (1
 *    by default): a long run for a test to kill a rank in.
 * A final MPI_Allreduce (max) of the error counts decides: rank 0 prints
 * "mpi_check ok: N ranks" and every rank exits 0, or each wrong value is
 * named and every rank exits 1. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REDUCE_N (64 * 1024)
#define A2A_N 4096
#define MSG (1 << 20)
#define MSGS 32
#define WINDOW 4

static int rank, size;

static long check_allreduce(void)
{
	double *in = malloc(REDUCE_N * sizeof(double)), *out = malloc(REDUCE_N * sizeof(double));
	long bad = 0;
	for (int i = 0; i < REDUCE_N; i++)
		in[i] = rank * 1000.0 + i;
	MPI_Allreduce(in, out, REDUCE_N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	/* sum over r of (r * 1000 + i) = 1000 * size * (size - 1) / 2 + size * i */
	for (int i = 0; i < REDUCE_N; i++) {
		double want = 1000.0 * size * (size - 1) / 2 + (double)size * i;
		if (out[i] != want && bad++ < 5)
			fprintf(stderr, "rank %d: allreduce[%d] = %f, want %f\n", rank, i, out[i],
				want);
	}
	free(in);
	free(out);
	return bad;
}

static long check_alltoall(void)
{
	int *in = malloc((size_t)size * A2A_N * sizeof(int));
	int *out = malloc((size_t)size * A2A_N * sizeof(int));
	long bad = 0;
	for (int d = 0; d < size; d++)
		for (int j = 0; j < A2A_N; j++)
			in[d * A2A_N + j] = rank * 1000000 + d * 10000 + j;
	MPI_Alltoall(in, A2A_N, MPI_INT, out, A2A_N, MPI_INT, MPI_COMM_WORLD);
	for (int s = 0; s < size; s++)
		for (int j = 0; j < A2A_N; j++) {
			int want = s * 1000000 + rank * 10000 + j;
			if (out[s * A2A_N + j] != want && bad++ < 5)
				fprintf(stderr, "rank %d: alltoall from %d [%d] = %d, want %d\n",
					rank, s, j, out[s * A2A_N + j], want);
		}
	free(in);
	free(out);
	return bad;
}

static unsigned char byte_of(int sender, int msg, size_t off)
{
	return (unsigned char)(sender * 31 + msg * 7 + off * 13 + (off >> 8));
}

static long check_bandwidth(void)
{
	int right = (rank + 1) % size, left = (rank + size - 1) % size;
	unsigned char *tx = malloc((size_t)WINDOW * MSG), *rx = malloc((size_t)WINDOW * MSG);
	MPI_Request req[2 * WINDOW];
	long bad = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	for (int m0 = 0; m0 < MSGS; m0 += WINDOW) {
		for (int w = 0; w < WINDOW; w++) {
			unsigned char *b = tx + (size_t)w * MSG;
			for (size_t o = 0; o < MSG; o++)
				b[o] = byte_of(rank, m0 + w, o);
			MPI_Irecv(rx + (size_t)w * MSG, MSG, MPI_BYTE, left, m0 + w, MPI_COMM_WORLD,
				  &req[w]);
			MPI_Isend(b, MSG, MPI_BYTE, right, m0 + w, MPI_COMM_WORLD, &req[WINDOW + w]);
		}
		MPI_Waitall(2 * WINDOW, req, MPI_STATUSES_IGNORE);
		for (int w = 0; w < WINDOW; w++)
			for (size_t o = 0; o < MSG; o++) {
				unsigned char got = rx[(size_t)w * MSG + o], want = byte_of(left, m0 + w, o);
				if (got != want && bad++ < 5)
					fprintf(stderr,
						"rank %d: message %d from %d byte %zu = %u, want %u\n",
						rank, m0 + w, left, o, got, want);
			}
	}
	double secs = MPI_Wtime() - t0;
	printf("rank %d: p2p %d x %d B to rank %d: %.1f MB/s\n", rank, MSGS, MSG, right,
	       (double)MSGS * MSG / secs / 1e6);
	free(tx);
	free(rx);
	return bad;
}

int main(int argc, char **argv)
{
	char host[MPI_MAX_PROCESSOR_NAME];
	int len;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Get_processor_name(host, &len);
	printf("rank %d of %d on %s\n", rank, size, host);
	long bad = 0, worst = 0;
	long a = check_allreduce();
	long t = check_alltoall();
	long rounds = argc > 1 ? atol(argv[1]) : 1, p = 0;
	for (long r = 0; r < rounds; r++)
		p += check_bandwidth();
	bad = a + t + p;
	printf("rank %d: allreduce %s, alltoall %s, p2p %s\n", rank, a ? "WRONG" : "ok",
	       t ? "WRONG" : "ok", p ? "WRONG" : "ok");
	MPI_Allreduce(&bad, &worst, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
	if (rank == 0 && worst == 0)
		printf("mpi_check ok: %d ranks\n", size);
	fflush(stdout);
	MPI_Finalize();
	return worst ? 1 : 0;
}
