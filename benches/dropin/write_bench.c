/* write_bench.c: ib_write_bw's and ib_write_lat's loops on two devices of
 * one `rnicd --mem-pair --one-thread`, driven from ONE thread, built twice:
 *
 *   -DAPI_VERBS   through libibverbs (run against softrnic's drop-in)
 *   -DAPI_SRNIC   through softrnic's own C API (srnic_*)
 *
 * so that the two builds differ only in the API layer. One thread drives
 * both ends (a two-core machine then has two busy threads, this one and
 * the engine; perftest's two processes would make three and measure the
 * scheduler). Buffers are ordinary posix_memalign memory in both.
 *
 *   write_bench SOCK_DIR DEV_A DEV_B bw|lat SIZE ITERS
 *
 * bw:  WRITEs of SIZE from A to B, 128 in flight, every 64th signaled
 *      (perftest's tx depth and CQ moderation); prints
 *      "bw SIZE ITERS GBPS MSGS_PER_S".
 * lat: A writes SIZE bytes to B, B polls the last byte, then B writes back
 *      to A (ib_write_lat's ping-pong); half the round trip per sample;
 *      prints "lat SIZE ITERS P50_US AVG_US P99_US".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEPTH 128
#define MOD 64
#define BUF (8u << 20)
/* each buffer: the bytes a side sends from at 0, those it receives at RX */
#define RX (BUF / 2)

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void die(const char *what)
{
	fprintf(stderr, "write_bench: %s failed (errno %d: %s)\n", what, errno, strerror(errno));
	exit(1);
}

#if defined(API_VERBS)
#include <infiniband/verbs.h>

struct ep {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	volatile uint8_t *buf;
	union ibv_gid gid;
};

static void ep_open(struct ep *e, const char *sock_dir, const char *name)
{
	int n, i;
	struct ibv_device **l;
	void *p;
	setenv("SOFTRNIC_SOCK_DIR", sock_dir, 1);
	l = ibv_get_device_list(&n);
	if (!l)
		die("ibv_get_device_list");
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(l[i]), name))
			break;
	if (i == n) {
		fprintf(stderr, "write_bench: no device %s (is the drop-in on the library path?)\n", name);
		exit(1);
	}
	if (!(e->ctx = ibv_open_device(l[i])))
		die("ibv_open_device");
	ibv_free_device_list(l);
	if (!(e->pd = ibv_alloc_pd(e->ctx)))
		die("ibv_alloc_pd");
	if (posix_memalign(&p, 4096, BUF))
		die("posix_memalign");
	memset(p, 0, BUF);
	e->buf = p;
	if (!(e->mr = ibv_reg_mr(e->pd, p, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
		die("ibv_reg_mr");
	if (!(e->cq = ibv_create_cq(e->ctx, 2 * DEPTH, NULL, NULL, 0)))
		die("ibv_create_cq");
	struct ibv_qp_init_attr a = {
		.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = DEPTH, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	if (!(e->qp = ibv_create_qp(e->pd, &a)))
		die("ibv_create_qp");
	if (ibv_query_gid(e->ctx, 1, 3, &e->gid))
		die("ibv_query_gid");
}

static void ep_connect(struct ep *e, struct ep *peer)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	if (ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("ibv_modify_qp INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024; /* srnic_connect_qp's path MTU */
	a.dest_qp_num = peer->qp->qp_num;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.sgid_index = 3;
	a.ah_attr.grh.hop_limit = 64;
	if (ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("ibv_modify_qp RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("ibv_modify_qp RTS");
}

static int ep_write(struct ep *e, struct ep *dst, uint32_t len, int signaled, uint64_t id)
{
	struct ibv_sge s = { .addr = (uintptr_t)e->buf, .length = len, .lkey = e->mr->lkey };
	struct ibv_send_wr w = {
		.wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = signaled ? IBV_SEND_SIGNALED : 0,
		.wr.rdma = { .remote_addr = (uintptr_t)(dst->buf + RX), .rkey = dst->mr->rkey },
	}, *bad;
	return ibv_post_send(e->qp, &w, &bad);
}

/* completions reaped (each stands for MOD WRITEs in bw), or -1 on an error status */
static int ep_poll(struct ep *e)
{
	struct ibv_wc wc[8];
	int n = ibv_poll_cq(e->cq, 8, wc), i;
	for (i = 0; i < n; i++)
		if (wc[i].status != IBV_WC_SUCCESS) {
			fprintf(stderr, "write_bench: completion status %d\n", wc[i].status);
			return -1;
		}
	return n;
}
#define API_NAME "verbs"

#elif defined(API_SRNIC)
#include "softrnic.h"

struct ep {
	struct srnic_context *ctx;
	struct srnic_pd *pd;
	struct srnic_cq *cq;
	struct srnic_qp *qp;
	struct srnic_mr *mr;
	volatile uint8_t *buf;
	struct srnic_device_attr attr;
};

static void ep_open(struct ep *e, const char *sock_dir, const char *name)
{
	char path[4096];
	void *p;
	snprintf(path, sizeof(path), "%s/%s.sock", sock_dir, name);
	if (!(e->ctx = srnic_open_device(path)))
		die("srnic_open_device");
	if (srnic_query_device(e->ctx, &e->attr))
		die("srnic_query_device");
	if (!(e->pd = srnic_alloc_pd(e->ctx)))
		die("srnic_alloc_pd");
	if (posix_memalign(&p, 4096, BUF))
		die("posix_memalign");
	memset(p, 0, BUF);
	e->buf = p;
	if (!(e->mr = srnic_reg_mr(e->pd, p, BUF, SRNIC_ACCESS_LOCAL_WRITE | SRNIC_ACCESS_REMOTE_WRITE)))
		die("srnic_reg_mr");
	if (!(e->cq = srnic_create_cq(e->ctx, 2 * DEPTH)))
		die("srnic_create_cq");
	struct srnic_qp_init_attr a = { .send_cq = e->cq, .recv_cq = e->cq,
					.max_send_wr = DEPTH, .max_recv_wr = 1 };
	if (!(e->qp = srnic_create_qp(e->pd, &a)))
		die("srnic_create_qp");
}

static void ep_connect(struct ep *e, struct ep *peer)
{
	if (srnic_connect_qp(e->qp, peer->attr.gid, peer->attr.mac, srnic_qp_num(peer->qp), 0, 0))
		die("srnic_connect_qp");
}

static int ep_write(struct ep *e, struct ep *dst, uint32_t len, int signaled, uint64_t id)
{
	struct srnic_sge s = { .addr = (uintptr_t)e->buf, .length = len, .lkey = srnic_mr_lkey(e->mr) };
	struct srnic_send_wr w = {
		.wr_id = id, .opcode = SRNIC_WR_RDMA_WRITE, .send_flags = signaled ? SRNIC_SEND_SIGNALED : 0,
		.sg_list = &s, .num_sge = 1,
		.remote_addr = (uintptr_t)(dst->buf + RX), .rkey = srnic_mr_rkey(dst->mr),
	};
	return srnic_post_send(e->qp, &w);
}

static int ep_poll(struct ep *e)
{
	struct srnic_wc wc[8];
	int n = srnic_poll_cq(e->cq, 8, wc), i;
	for (i = 0; i < n; i++)
		if (wc[i].status != SRNIC_WC_SUCCESS) {
			fprintf(stderr, "write_bench: completion status %u\n", wc[i].status);
			return -1;
		}
	return n;
}
#define API_NAME "srnic"
#else
#error "build with -DAPI_VERBS or -DAPI_SRNIC"
#endif

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void bw(struct ep *a, struct ep *b, uint32_t size, long iters)
{
	long posted = 0, done = 0;
	double t0;
	iters = (iters + MOD - 1) / MOD * MOD;
	t0 = now_us();
	while (done < iters) {
		while (posted < iters && posted - done < DEPTH) {
			if (ep_write(a, b, size, (posted + 1) % MOD == 0, posted))
				die("post");
			posted++;
		}
		int n = ep_poll(a);
		if (n < 0)
			exit(1);
		done += (long)n * MOD;
	}
	double us = now_us() - t0;
	printf("%s bw %u %ld %.3f %.0f\n", API_NAME, size, iters, size * 8.0 * iters / us / 1e3,
	       iters / us * 1e6);
}

/* waits until the last byte of what e received reads v */
static void wait_byte(struct ep *e, uint32_t size, uint8_t v)
{
	while (e->buf[RX + size - 1] != v)
		;
}

static void lat(struct ep *a, struct ep *b, uint32_t size, long iters)
{
	double *s = malloc(sizeof(double) * iters), sum = 0;
	long i;
	int pend_a = 0, pend_b = 0;
	if (!s)
		die("malloc");
	for (i = 0; i < iters; i++) {
		uint8_t v = (uint8_t)(i % 255 + 1);
		int sig = (i + 1) % MOD == 0;
		double t0 = now_us();
		a->buf[size - 1] = v;
		if (ep_write(a, b, size, sig, i))
			die("post");
		wait_byte(b, size, v);
		b->buf[size - 1] = v;
		if (ep_write(b, a, size, sig, i))
			die("post");
		wait_byte(a, size, v);
		s[i] = (now_us() - t0) / 2;
		sum += s[i];
		pend_a += sig;
		pend_b += sig;
		/* keep the send queues from filling: reap the signaled ones */
		while (pend_a > 0) {
			int n = ep_poll(a);
			if (n < 0)
				exit(1);
			pend_a -= n;
			if (n == 0)
				break;
		}
		while (pend_b > 0) {
			int n = ep_poll(b);
			if (n < 0)
				exit(1);
			pend_b -= n;
			if (n == 0)
				break;
		}
	}
	qsort(s, iters, sizeof(double), cmp_double);
	printf("%s lat %u %ld %.3f %.3f %.3f\n", API_NAME, size, iters, s[iters / 2], sum / iters,
	       s[(long)(iters * 0.99)]);
	free(s);
}

int main(int argc, char **argv)
{
	struct ep a, b;
	if (argc != 7) {
		fprintf(stderr, "usage: %s SOCK_DIR DEV_A DEV_B bw|lat SIZE ITERS\n", argv[0]);
		return 2;
	}
	uint32_t size = (uint32_t)strtoul(argv[5], NULL, 0);
	long iters = strtol(argv[6], NULL, 0);
	if (size == 0 || size > RX || iters <= 0) {
		fprintf(stderr, "write_bench: SIZE must be 1..%u and ITERS positive\n", RX);
		return 2;
	}
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	ep_open(&a, argv[1], argv[2]);
	ep_open(&b, argv[1], argv[3]);
	ep_connect(&a, &b);
	ep_connect(&b, &a);
	if (!strcmp(argv[4], "bw"))
		bw(&a, &b, size, iters);
	else if (!strcmp(argv[4], "lat"))
		lat(&a, &b, size, iters);
	else {
		fprintf(stderr, "write_bench: bw or lat, not %s\n", argv[4]);
		return 2;
	}
	return 0;
}
