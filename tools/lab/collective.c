/* The collective workload of `rnic lab` (tools/src/lab/collective.rs
 * compiles it with mpicc at lab time): one MPI collective, over and over,
 * each iteration timed.
 *
 *   collective allreduce|alltoall SIZE ITERATIONS SECONDS
 *
 * allreduce: MPI_Allreduce (sum) of SIZE bytes of floats, in place of the
 * usual separate buffers; alltoall: MPI_Alltoall of SIZE bytes from each
 * rank, SIZE / ranks bytes to each peer. One warm-up iteration (UCX's
 * endpoints are made on first use) is not reported. Then each iteration:
 * the send buffer filled, MPI_Barrier, MPI_Wtime, the collective,
 * MPI_Wtime, the result checked, and an MPI_Allreduce
 * (max) of the rank's own time: the iteration's completion time is the
 * slowest rank's. Every rank gets that maximum, so all of them add up the
 * same elapsed time and stop together: after ITERATIONS iterations (when
 * > 0), else once the completion times add up to SECONDS.
 *
 * Rank 0 prints one line per iteration, flushed as it ends:
 *   iteration 7 time_us 1234.5
 * and at the end "collective done: N iterations". A result that is wrong
 * (every element is checked against its closed form each iteration)
 * ends the job (MPI_Abort) with a line naming it. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, ranks;

/* element i of rank r's contribution to the allreduce: small integers,
 * so the float sums are exact */
static float part(int r, long i) { return (float)((r + 1) * (int)(i % 64)); }

/* what rank r sends rank d at j in the alltoall */
static int cell(int r, int d, long j) { return r * 65536 + d * 256 + (int)(j % 256); }

/* fills the send buffers (before the clock starts) */
static void fill(int reduce, float *buf, long n, int *in, long per)
{
	if (reduce)
		for (long i = 0; i < n; i++)
			buf[i] = part(rank, i);
	else
		for (int d = 0; d < ranks; d++)
			for (long j = 0; j < per; j++)
				in[d * per + j] = cell(rank, d, j);
}

static void collective(int reduce, float *buf, long n, int *in, int *out, long per)
{
	if (reduce)
		MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	else
		MPI_Alltoall(in, (int)per, MPI_INT, out, (int)per, MPI_INT, MPI_COMM_WORLD);
}

/* checks the result (after the clock stops): 0, or 1 after naming the
 * first wrong element */
static int check(int reduce, const float *buf, long n, const int *out, long per)
{
	if (reduce) {
		/* sum over r of (r + 1) * (i % 64) */
		for (long i = 0; i < n; i++) {
			float want = (float)(ranks * (ranks + 1) / 2 * (int)(i % 64));
			if (buf[i] != want) {
				fprintf(stderr, "rank %d: allreduce[%ld] = %f, want %f\n", rank, i,
					buf[i], want);
				return 1;
			}
		}
		return 0;
	}
	for (int s = 0; s < ranks; s++)
		for (long j = 0; j < per; j++)
			if (out[s * per + j] != cell(s, rank, j)) {
				fprintf(stderr, "rank %d: alltoall from %d [%ld] = %d, want %d\n", rank, s,
					j, out[s * per + j], cell(s, rank, j));
				return 1;
			}
	return 0;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &ranks);
	if (argc != 5 || (strcmp(argv[1], "allreduce") && strcmp(argv[1], "alltoall"))) {
		if (rank == 0)
			fprintf(stderr, "usage: collective allreduce|alltoall SIZE ITERATIONS SECONDS\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int reduce = strcmp(argv[1], "allreduce") == 0;
	long size = atol(argv[2]), iterations = atol(argv[3]);
	double seconds = atof(argv[4]);
	long n = size / 4, per = size / 4 / ranks;
	if (n < 1 || (!reduce && per < 1)) {
		if (rank == 0)
			fprintf(stderr, "collective: SIZE %ld too small for %d ranks\n", size, ranks);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	float *buf = reduce ? malloc(n * sizeof(float)) : NULL;
	int *in = reduce ? NULL : malloc(ranks * per * sizeof(int));
	int *out = reduce ? NULL : malloc(ranks * per * sizeof(int));
	double elapsed = 0;
	long done = 0;
	for (long it = -1;; it++) {
		fill(reduce, buf, n, in, per);
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		collective(reduce, buf, n, in, out, per);
		double mine = MPI_Wtime() - t0, slowest;
		if (check(reduce, buf, n, out, per))
			MPI_Abort(MPI_COMM_WORLD, 1);
		MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		if (it < 0)
			continue;
		done++;
		elapsed += slowest;
		if (rank == 0) {
			printf("iteration %ld time_us %.1f\n", it, slowest * 1e6);
			fflush(stdout);
		}
		if (iterations > 0 ? done >= iterations : elapsed >= seconds)
			break;
	}
	if (rank == 0)
		printf("collective done: %ld iterations\n", done);
	free(buf);
	free(in);
	free(out);
	MPI_Finalize();
	return 0;
}
