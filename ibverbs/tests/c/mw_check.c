/* Memory windows and invalidation through libibverbs, one line per step:
 * what each verb returned and each completion's status, opcode and flags.
 * Built against rdma-core's <infiniband/verbs.h>; runs on any device —
 * the softrnic drop-in (two devices of one rnicd --mem-pair) or Linux rxe
 * (one device, its two QPs talking over loopback) — so the transcripts of
 * both can be compared line by line. Exit 0 once every step ran.
 *
 * Usage: mw_check [GID_INDEX]   (default 3: softrnic's RoCE v2 IPv4 GID;
 * rxe's is 1) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static int gid_index = 3;
static struct ibv_context *ctx[2];
static struct ibv_pd *pd[2];
static union ibv_gid gid[2];

struct pair {
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
};

static void die(const char *what) {
	fprintf(stderr, "mw_check: %s failed (errno %d)\n", what, errno);
	exit(2);
}

static void to_rts(struct ibv_qp *qp, struct ibv_qp *peer, int side) {
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify_qp INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = peer->qp_num; a.rq_psn = 0;
	a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid[!side]; a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 64; a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify_qp RTR");
	memset(&a, 0, sizeof(a));
	/* a short timeout and few retries: a peer that stops answering is
	 * reported quickly */
	a.qp_state = IBV_QPS_RTS; a.timeout = 12; a.retry_cnt = 2; a.rnr_retry = 7; a.sq_psn = 0; a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify_qp RTS");
}

/* A connected RC pair: side 0 (A) and side 1 (B). */
static struct pair new_pair(void) {
	struct pair p;
	for (int i = 0; i < 2; i++) {
		p.cq[i] = ibv_create_cq(ctx[i], 64, NULL, NULL, 0);
		if (!p.cq[i]) die("create_cq");
		struct ibv_qp_init_attr a = { .send_cq = p.cq[i], .recv_cq = p.cq[i], .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 } };
		p.qp[i] = ibv_create_qp(pd[i], &a);
		if (!p.qp[i]) die("create_qp");
	}
	to_rts(p.qp[0], p.qp[1], 0);
	to_rts(p.qp[1], p.qp[0], 1);
	return p;
}

static void free_pair(struct pair *p) {
	for (int i = 0; i < 2; i++) {
		if (ibv_destroy_qp(p->qp[i])) die("destroy_qp");
		if (ibv_destroy_cq(p->cq[i])) die("destroy_cq");
	}
}

/* Waits for one completion on side `i` and prints it. */
static struct ibv_wc wc_line(struct pair *p, int i, const char *what) {
	struct ibv_wc wc;
	memset(&wc, 0, sizeof(wc));
	int n = 0;
	for (long k = 0; k < 2000000L && n == 0; k++) {
		n = ibv_poll_cq(p->cq[i], 1, &wc);
		if (n == 0 && (k & 63) == 63)
			usleep(100);
	}
	if (n != 1) {
		printf("%s: no completion\n", what);
		return wc;
	}
	printf("%s: status=%s", what, ibv_wc_status_str(wc.status));
	if (wc.status == IBV_WC_SUCCESS) {
		printf(" opcode=%d", wc.opcode);
		if (wc.opcode & IBV_WC_RECV)
			printf(" wc_flags=%#x", wc.wc_flags);
	}
	printf("\n");
	return wc;
}

static void qp_state_line(struct pair *p, int i, const char *what) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(p->qp[i], &a, IBV_QP_STATE, &ia)) die("query_qp");
	printf("%s: state=%s\n", what, a.qp_state == IBV_QPS_ERR ? "ERR" : a.qp_state == IBV_QPS_RTS ? "RTS" : "other");
}

static char *abuf, *bbuf;
static struct ibv_mr *amr, *bmr, *bplain;

/* A posts one WR on its QP. */
static void post_a(struct pair *p, enum ibv_wr_opcode op, uint64_t raddr, uint32_t rkey, uint32_t len, uint32_t inv) {
	struct ibv_sge sg = { .addr = (uintptr_t)abuf, .length = len, .lkey = amr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sg, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (op == IBV_WR_SEND_WITH_INV)
		wr.invalidate_rkey = inv;
	if (ibv_post_send(p->qp[0], &wr, &bad)) die("post_send A");
}

static void post_recv_b(struct pair *p) {
	struct ibv_sge sg = { .addr = (uintptr_t)bbuf + 0x3000, .length = 256, .lkey = bmr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 2, .sg_list = &sg, .num_sge = 1 }, *bad;
	if (ibv_post_recv(p->qp[1], &wr, &bad)) die("post_recv B");
}

/* B binds type 2 window `mw` with a BIND_MW work request; its new rkey. */
static uint32_t bind2(struct pair *p, struct ibv_mw *mw, struct ibv_mr *mr, uint64_t off, uint64_t len,
		      unsigned acc, const char *what) {
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr wr = { .wr_id = 3, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)bbuf + off;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = acc;
	int r = ibv_post_send(p->qp[1], &wr, &bad);
	if (r) {
		printf("%s: post=%d\n", what, r);
		return 0;
	}
	struct ibv_wc wc = wc_line(p, 1, what);
	if (wc.status == IBV_WC_SUCCESS)
		mw->rkey = rkey;
	return rkey;
}

static void local_inv(struct pair *p, uint32_t rkey, const char *what) {
	struct ibv_send_wr wr = { .wr_id = 4, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.invalidate_rkey = rkey;
	int r = ibv_post_send(p->qp[1], &wr, &bad);
	if (r) {
		printf("%s: post=%d\n", what, r);
		return;
	}
	wc_line(p, 1, what);
}

int main(int argc, char **argv) {
	if (argc > 1)
		gid_index = atoi(argv[1]);
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) die("ibv_get_device_list");
	for (int i = 0; i < 2; i++) {
		ctx[i] = ibv_open_device(list[n > 1 ? i : 0]);
		if (!ctx[i]) die("open_device");
		pd[i] = ibv_alloc_pd(ctx[i]);
		if (!pd[i]) die("alloc_pd");
		if (ibv_query_gid(ctx[i], 1, gid_index, &gid[i])) die("query_gid");
	}
	struct ibv_device_attr da;
	if (ibv_query_device(ctx[1], &da)) die("query_device");
	printf("device: mem_window=%d type_2b=%d max_mw>0=%d\n", !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW),
	       !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B), da.max_mw > 0);

	abuf = aligned_alloc(4096, 1 << 16);
	bbuf = aligned_alloc(4096, 1 << 16);
	memset(abuf, 0x11, 1 << 16);
	memset(bbuf, 0, 1 << 16);
	amr = ibv_reg_mr(pd[0], abuf, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
	bmr = ibv_reg_mr(pd[1], bbuf, 1 << 15, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	bplain = ibv_reg_mr(pd[1], bbuf + (1 << 15), 1 << 15,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!amr || !bmr || !bplain) die("reg_mr");
	struct ibv_mw *mw1 = ibv_alloc_mw(pd[1], IBV_MW_TYPE_1);
	struct ibv_mw *mw2 = ibv_alloc_mw(pd[1], IBV_MW_TYPE_2);
	printf("alloc_mw: type1=%s type2=%s\n", mw1 ? "ok" : "failed", mw2 ? "ok" : "failed");
	if (!mw1 || !mw2) return 1;

	/* type 2: bound by a work request, written through, revoked by a
	 * SEND with Invalidate */
	struct pair p = new_pair();
	uint32_t k2 = bind2(&p, mw2, bmr, 0x1000, 0x1000, IBV_ACCESS_REMOTE_WRITE, "type2 bind");
	post_a(&p, IBV_WR_RDMA_WRITE, (uintptr_t)bbuf + 0x1800, k2, 64, 0);
	wc_line(&p, 0, "write through type2");
	printf("data written: %d\n", bbuf[0x1800] == 0x11 && bbuf[0x1800 + 63] == 0x11 && bbuf[0x1840] == 0);
	int r = ibv_dereg_mr(bmr);
	printf("dereg_mr with a bound window: %s\n", r ? "refused" : "done");
	post_recv_b(&p);
	post_a(&p, IBV_WR_SEND_WITH_INV, 0, 0, 16, k2);
	wc_line(&p, 0, "send_with_inv type2 (A)");
	struct ibv_wc wc = wc_line(&p, 1, "send_with_inv type2 (B)");
	printf("invalidated_rkey matches: %d\n", (wc.wc_flags & IBV_WC_WITH_INV) && wc.invalidated_rkey == k2);
	post_a(&p, IBV_WR_RDMA_WRITE, (uintptr_t)bbuf + 0x1800, k2, 8, 0);
	wc_line(&p, 0, "write after invalidate");
	free_pair(&p);

	/* type 2 again: bind, write outside the window */
	p = new_pair();
	k2 = bind2(&p, mw2, bmr, 0x1000, 0x1000, IBV_ACCESS_REMOTE_WRITE, "type2 rebind after invalidate");
	post_a(&p, IBV_WR_RDMA_WRITE, (uintptr_t)bbuf + 0x1ff8, k2, 16, 0);
	wc_line(&p, 0, "write across the window's end");
	free_pair(&p);

	/* LOCAL_INV: once, then again */
	p = new_pair();
	local_inv(&p, mw2->rkey, "local_inv type2 (bound to a destroyed QP)");
	free_pair(&p);
	p = new_pair();
	k2 = bind2(&p, mw2, bmr, 0x1000, 0x100, IBV_ACCESS_REMOTE_READ, "type2 bind for local_inv");
	local_inv(&p, k2, "local_inv type2");
	post_a(&p, IBV_WR_RDMA_READ, (uintptr_t)bbuf + 0x1000, k2, 8, 0);
	wc_line(&p, 0, "read after local_inv");
	free_pair(&p);
	p = new_pair();
	local_inv(&p, bplain->rkey, "local_inv of a regular region");
	qp_state_line(&p, 1, "B after local_inv of a region");
	free_pair(&p);

	/* type 1: ibv_bind_mw, a new tag per bind, the old tag dead */
	p = new_pair();
	struct ibv_mw_bind mb = { .wr_id = 5, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = bmr, .addr = (uintptr_t)bbuf, .length = 0x800, .mw_access_flags = IBV_ACCESS_REMOTE_READ } };
	uint32_t before = mw1->rkey;
	r = ibv_bind_mw(p.qp[1], mw1, &mb);
	printf("ibv_bind_mw type1: ret=%d rkey incremented=%d\n", r, mw1->rkey == ibv_inc_rkey(before));
	wc_line(&p, 1, "type1 bind");
	uint32_t k1 = mw1->rkey;
	post_a(&p, IBV_WR_RDMA_READ, (uintptr_t)bbuf + 0x10, k1, 8, 0);
	wc_line(&p, 0, "read through type1");
	r = ibv_bind_mw(p.qp[1], mw1, &mb);
	wc_line(&p, 1, "type1 rebind");
	post_a(&p, IBV_WR_RDMA_READ, (uintptr_t)bbuf + 0x10, mw1->rkey, 8, 0);
	wc_line(&p, 0, "read through the new tag");
	post_a(&p, IBV_WR_RDMA_READ, (uintptr_t)bbuf + 0x10, k1, 8, 0);
	wc_line(&p, 0, "read through the old tag");
	free_pair(&p);
	p = new_pair();
	local_inv(&p, mw1->rkey, "local_inv type1");
	free_pair(&p);
	p = new_pair();
	post_recv_b(&p);
	post_a(&p, IBV_WR_SEND_WITH_INV, 0, 0, 16, mw1->rkey);
	wc_line(&p, 0, "send_with_inv type1 (A)");
	wc_line(&p, 1, "send_with_inv type1 (B)");
	qp_state_line(&p, 1, "B after send_with_inv type1");
	free_pair(&p);

	/* a SEND with Invalidate naming a regular region (IBA 10.6.7.3) */
	p = new_pair();
	post_recv_b(&p);
	post_a(&p, IBV_WR_SEND_WITH_INV, 0, 0, 16, bplain->rkey);
	wc_line(&p, 0, "send_with_inv region (A)");
	wc_line(&p, 1, "send_with_inv region (B)");
	qp_state_line(&p, 1, "B after send_with_inv region");
	free_pair(&p);
	p = new_pair();
	post_a(&p, IBV_WR_RDMA_WRITE, (uintptr_t)bbuf + (1 << 15), bplain->rkey, 8, 0);
	wc_line(&p, 0, "write to the region afterwards");
	free_pair(&p);

	/* binds that must fail */
	p = new_pair();
	bind2(&p, mw2, bplain, 1 << 15, 0x100, IBV_ACCESS_REMOTE_READ, "type2 bind to a region without MW_BIND");
	qp_state_line(&p, 1, "B after a failed bind");
	free_pair(&p);
	p = new_pair();
	bind2(&p, mw2, bmr, (1 << 15) - 0x10, 0x100, IBV_ACCESS_REMOTE_READ, "type2 bind past the region");
	free_pair(&p);

	printf("dealloc_mw: %d %d\n", ibv_dealloc_mw(mw1), ibv_dealloc_mw(mw2));
	printf("dereg_mr after: %d %d %d\n", ibv_dereg_mr(bmr), ibv_dereg_mr(bplain), ibv_dereg_mr(amr));
	for (int i = 0; i < 2; i++) {
		ibv_dealloc_pd(pd[i]);
		ibv_close_device(ctx[i]);
	}
	ibv_free_device_list(list);
	printf("done\n");
	return 0;
}
