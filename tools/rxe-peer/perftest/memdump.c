/*
 * memdump.c: an LD_PRELOAD library for perftest in the rxe-peer guest, so the
 * interop suite can check the data a perftest run moved (perftest itself
 * never does: it fills its buffer with rand() and measures).
 *
 * With SRNIC_MEMDUMP=PREFIX in the environment it records every memory
 * region the process registers and writes, for region K:
 *
 *   PREFIX.regions     one line per region: "K ADDR LEN" (hex address)
 *   PREFIX.init.K      the region's bytes just before the first QP moves to
 *                      RTR (perftest has filled its buffer by then, and no
 *                      packet can have been accepted: a QP below RTR takes
 *                      none, IBTA 10.3.1)
 *   PREFIX.final.K     the region's bytes when it is deregistered (perftest
 *                      deregisters after its last exchange with the peer),
 *                      or at exit if it never is (ib_atomic_lat's server)
 *
 * `rnic memcheck` compares these with rnic perf's --dump-mem files.
 *
 * Only the public entry points of libibverbs are wrapped (the real ones are
 * found with dlsym(RTLD_NEXT)); argument types are passed through as
 * pointers, so no rdma-core headers are needed to build it:
 *
 *   cc -O2 -shared -fPIC -o memdump.so memdump.c -ldl
 *
 * Written for softrnic; the verbs prototypes are libibverbs' (verbs.h).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_REGIONS 16
/* enum ibv_qp_attr_mask: IBV_QP_STATE; enum ibv_qp_state: IBV_QPS_RTR */
#define QP_STATE_MASK 1
#define QPS_RTR 2

struct region {
	void *mr;   /* the struct ibv_mr * the library returned */
	char *addr;
	size_t len;
	int dumped_final;
};

static struct region regions[MAX_REGIONS];
static int n_regions;
static int init_done;

static const char *prefix(void)
{
	const char *p = getenv("SRNIC_MEMDUMP");
	return (p && *p) ? p : NULL;
}

static void *real(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);
	if (!f) {
		fprintf(stderr, "memdump: no %s in the next library\n", name);
		abort();
	}
	return f;
}

static void write_file(const char *what, int k, const char *data, size_t len)
{
	char path[4096];
	const char *p = prefix();
	size_t off = 0;
	int fd;

	if (!p)
		return;
	snprintf(path, sizeof path, "%s.%s.%d", p, what, k);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		fprintf(stderr, "memdump: cannot create %s\n", path);
		return;
	}
	while (off < len) {
		ssize_t n = write(fd, data + off, len - off);
		if (n <= 0) {
			fprintf(stderr, "memdump: short write to %s\n", path);
			break;
		}
		off += (size_t)n;
	}
	close(fd);
}

static void write_regions(void)
{
	char path[4096];
	const char *p = prefix();
	FILE *f;
	int k;

	if (!p)
		return;
	snprintf(path, sizeof path, "%s.regions", p);
	f = fopen(path, "w");
	if (!f)
		return;
	for (k = 0; k < n_regions; k++)
		fprintf(f, "%d %lx %zu\n", k, (unsigned long)(uintptr_t)regions[k].addr, regions[k].len);
	fclose(f);
}

static void *note_region(void *mr, void *addr, size_t len)
{
	if (mr && addr && n_regions < MAX_REGIONS) {
		regions[n_regions].mr = mr;
		regions[n_regions].addr = addr;
		regions[n_regions].len = len;
		regions[n_regions].dumped_final = 0;
		n_regions++;
		write_regions();
	}
	return mr;
}

void *ibv_reg_mr(void *pd, void *addr, size_t length, int access)
{
	void *(*f)(void *, void *, size_t, int) = real("ibv_reg_mr");
	return note_region(f(pd, addr, length, access), addr, length);
}

void *ibv_reg_mr_iova(void *pd, void *addr, size_t length, uint64_t iova, int access)
{
	void *(*f)(void *, void *, size_t, uint64_t, int) = real("ibv_reg_mr_iova");
	return note_region(f(pd, addr, length, iova, access), addr, length);
}

void *ibv_reg_mr_iova2(void *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	void *(*f)(void *, void *, size_t, uint64_t, unsigned int) = real("ibv_reg_mr_iova2");
	return note_region(f(pd, addr, length, iova, access), addr, length);
}

int ibv_modify_qp(void *qp, void *attr, int attr_mask)
{
	int (*f)(void *, void *, int) = real("ibv_modify_qp");
	int k;

	/* struct ibv_qp_attr begins with enum ibv_qp_state qp_state */
	if (!init_done && (attr_mask & QP_STATE_MASK) && *(const int *)attr == QPS_RTR) {
		init_done = 1;
		for (k = 0; k < n_regions; k++)
			write_file("init", k, regions[k].addr, regions[k].len);
	}
	return f(qp, attr, attr_mask);
}

int ibv_dereg_mr(void *mr)
{
	int (*f)(void *) = real("ibv_dereg_mr");
	int k;

	for (k = 0; k < n_regions; k++) {
		if (regions[k].mr == mr && !regions[k].dumped_final) {
			regions[k].dumped_final = 1;
			write_file("final", k, regions[k].addr, regions[k].len);
		}
	}
	return f(mr);
}

/* Regions still registered when the process exits (a perftest side that
 * returns without destroying its context) are dumped as they are then. */
__attribute__((destructor)) static void dump_at_exit(void)
{
	int k;

	for (k = 0; k < n_regions; k++) {
		if (!regions[k].dumped_final) {
			regions[k].dumped_final = 1;
			write_file("final", k, regions[k].addr, regions[k].len);
		}
	}
}
