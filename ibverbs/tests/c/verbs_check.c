/* Compiled against rdma-core's <infiniband/verbs.h> and linked to the
 * softrnic drop-in: ordinary memory registered and written by RDMA byte
 * for byte, overlapping and unaligned registrations, and verbs called
 * wrongly (NULL, wrong order, past the limits, refused memory) getting
 * rdma-core's errors without harm. Exit 0 when every check holds. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "rc_connect.h"

static int fails;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: %s (errno %d)\n", __FILE__, __LINE__, #c, errno); fails++; } } while (0)

struct side { struct ibv_context *ctx; struct ibv_pd *pd; struct ibv_cq *cq; struct ibv_qp *qp; union ibv_gid gid; };

static void open_side(struct side *s, struct ibv_device *d) {
	s->ctx = ibv_open_device(d);
	CHECK(s->ctx);
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr a = { .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2, .max_recv_sge = 2 } };
	s->qp = ibv_create_qp(s->pd, &a);
	CHECK(s->qp);
	CHECK(ibv_query_gid(s->ctx, 1, 3, &s->gid) == 0);
}

static int connect_qp(struct side *s, struct side *peer) {
	return rc_connect(s->qp, peer->qp->qp_num, peer->gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE);
}

static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc) {
	for (long i = 0; i < 400000000L; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n) return n;
		if ((i & 1023) == 0) usleep(10);
	}
	return 0;
}

int main(void) {
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 2);
	if (!list || n != 2) return 1;
	struct side a, b;
	open_side(&a, list[0]);
	open_side(&b, list[1]);

	/* misuse: wrong order, NULLs, limits */
	struct ibv_send_wr *bad = NULL;
	struct ibv_sge sg = { 0 };
	struct ibv_send_wr wr = { .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	CHECK(ibv_post_send(a.qp, &wr, &bad) == EINVAL && bad == &wr);   /* QP in RESET */
	struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS };
	CHECK(ibv_modify_qp(a.qp, &rts, IBV_QP_STATE) == EINVAL);        /* RESET -> RTS */
	errno = 0;
	CHECK(ibv_alloc_pd(NULL) == NULL && errno == EINVAL);
	CHECK(ibv_create_cq(a.ctx, 1 << 30, NULL, NULL, 0) == NULL && errno == EINVAL);
	CHECK(ibv_reg_mr(a.pd, NULL, 100, 0) == NULL);
	CHECK(ibv_reg_mr(a.pd, &n, 4, IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL); /* no local write */
	char path[] = "/tmp/srnic-verbs-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0 && ftruncate(fd, 8192) == 0);
	char *shared = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	unlink(path);
	strcpy(shared, "file");
	errno = 0;
	CHECK(ibv_reg_mr(a.pd, shared, 8192, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EOPNOTSUPP);
	strcpy(shared + 100, "still mine");               /* the mapping is unchanged */
	char back[16] = { 0 };
	CHECK(pread(fd, back, 10, 100) == 10 && strcmp(back, "still mine") == 0);
	struct ibv_qp_init_attr big = { .send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1 << 30, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK(ibv_create_qp(a.pd, &big) == NULL && errno == EINVAL);

	CHECK(connect_qp(&a, &b) == 0);
	CHECK(connect_qp(&b, &a) == 0);

	/* ordinary memory: a malloc block (unaligned start and length) and a
	 * posix_memalign block written by RDMA WRITE, byte for byte */
	size_t len = 70000 + 13;
	char *src = malloc(len + 7) + 3;
	char *dst;
	CHECK(posix_memalign((void **)&dst, 4096, 1 << 17) == 0);
	for (size_t i = 0; i < len; i++) { src[i] = (char)(i * 31 + 7); }
	memset(dst, 0, 1 << 17);
	struct ibv_mr *smr = ibv_reg_mr(a.pd, src, len, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(b.pd, dst + 5, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	/* an overlapping registration of the same pages */
	struct ibv_mr *dmr2 = ibv_reg_mr(b.pd, dst, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(smr && dmr && dmr2);
	CHECK(ibv_dealloc_pd(b.pd) == EBUSY);                 /* MRs still on it */
	CHECK(ibv_destroy_cq(a.cq) == EBUSY);                 /* a QP still uses it */
	sg.addr = (uintptr_t)src; sg.length = len; sg.lkey = smr->lkey;
	wr.wr.rdma.remote_addr = (uintptr_t)(dst + 5); wr.wr.rdma.rkey = dmr->rkey; wr.wr_id = 42;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == 0);
	struct ibv_wc wc;
	CHECK(wait_wc(a.cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 42 && wc.opcode == IBV_WC_RDMA_WRITE);
	CHECK(memcmp(dst + 5, src, len) == 0);
	CHECK(dst[4] == 0 && dst[5 + len] == 0);
	/* READ it back through the overlapping region into fresh malloc memory */
	char *rd = calloc(1, 4096);
	struct ibv_mr *rmr = ibv_reg_mr(a.pd, rd, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(rmr != NULL);
	struct ibv_sge rsg = { .addr = (uintptr_t)rd, .length = 4096, .lkey = rmr->lkey };
	struct ibv_send_wr rwr = { .wr_id = 43, .sg_list = &rsg, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED };
	rwr.wr.rdma.remote_addr = (uintptr_t)dst; rwr.wr.rdma.rkey = dmr2->rkey;
	CHECK(ibv_post_send(a.qp, &rwr, &bad) == 0);
	CHECK(wait_wc(a.cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 43);
	CHECK(memcmp(rd, dst, 4096) == 0 && memcmp(rd + 5, src, 100) == 0);
	/* a WRITE past the region: a remote access error, and the QP goes to ERR */
	wr.wr.rdma.remote_addr = (uintptr_t)(dst + 5 + len - 10); wr.wr_id = 44; sg.length = 100;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == 0);
	CHECK(wait_wc(a.cq, &wc) == 1 && wc.status == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 44);
	CHECK(dst[5 + len] == 0);

	/* register, free, malloc again, register again */
	CHECK(ibv_dereg_mr(rmr) == 0);
	free(rd);
	rd = malloc(1 << 20);
	memset(rd, 0x5a, 1 << 20);
	rmr = ibv_reg_mr(a.pd, rd, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
	CHECK(rmr != NULL && rd[12345] == 0x5a);

	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0);
	CHECK(ibv_dereg_mr(rmr) == 0 && ibv_dereg_mr(smr) == 0 && ibv_dereg_mr(dmr) == 0 && ibv_dereg_mr(dmr2) == 0);
	CHECK(ibv_destroy_cq(a.cq) == 0 && ibv_destroy_cq(b.cq) == 0);
	CHECK(ibv_dealloc_pd(a.pd) == 0 && ibv_dealloc_pd(b.pd) == 0);
	CHECK(ibv_close_device(a.ctx) == 0 && ibv_close_device(b.ctx) == 0);
	ibv_free_device_list(list);
	printf("%d failures\n", fails);
	return fails != 0;
}
