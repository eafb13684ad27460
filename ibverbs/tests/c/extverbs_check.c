/* The extended verbs, compiled against rdma-core's <infiniband/verbs.h>
 * and linked to the softrnic drop-in: an RC QP from ibv_create_qp_ex on
 * device 0 posts every ibv_wr_* operation (RDMA WRITE with and without
 * immediate, READ, SEND, with immediate and with invalidate, both atomics,
 * bind_mw, local_inv; SGE lists and inline data) to a QP on device 1;
 * both CQs come from ibv_create_cq_ex and are read with ibv_start_poll /
 * ibv_next_poll and the ibv_wc_read_* accessors. The data each moved and
 * each completion's fields are checked; so are the errors of bad ibv_wr_*
 * sequences (each posting nothing and leaving the QP usable), the
 * refusals at creation, ibv_rereg_mr's return codes and what it changes,
 * and ibv_resize_cq with completions waiting. Exit 0 when every check
 * holds ("0 failures"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "rc_connect.h"

static int fails;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: %s (errno %d)\n", __FILE__, __LINE__, #c, errno); \
	fails++; } } while (0)

enum { BUF = 1 << 16, ALL_RC_OPS = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
	IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
	IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |
	IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV };

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq_ex *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	union ibv_gid gid;
	char *buf;
	struct ibv_mr *mr;
};

/* One completion as the accessors read it. */
struct comp {
	int status, opcode;
	uint64_t wr_id;
	uint32_t byte_len, qp_num, src_qp, flags, imm, vendor_err, slid;
	uint8_t sl, dlid_path_bits;
};

static struct ibv_cq_ex *cq_ex(struct ibv_context *ctx, struct ibv_comp_channel *ch, uint64_t wc_flags) {
	struct ibv_cq_init_attr_ex a = { .cqe = 64, .channel = ch, .wc_flags = wc_flags };
	return ibv_create_cq_ex(ctx, &a);
}

static struct ibv_qp *qp_ex(struct side *s, enum ibv_qp_type t, uint64_t ops, uint32_t max_send_wr) {
	struct ibv_qp_init_attr_ex a = { .send_cq = ibv_cq_ex_to_cq(s->cq), .recv_cq = ibv_cq_ex_to_cq(s->cq),
		.qp_type = t, .cap = { .max_send_wr = max_send_wr, .max_recv_wr = 32, .max_send_sge = 2,
		.max_recv_sge = 2, .max_inline_data = 64 }, .pd = s->pd,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .send_ops_flags = ops };
	return ibv_create_qp_ex(s->ctx, &a);
}

static void open_side(struct side *s, struct ibv_device *d) {
	s->ctx = ibv_open_device(d);
	CHECK(s->ctx);
	s->pd = ibv_alloc_pd(s->ctx);
	s->ch = ibv_create_comp_channel(s->ctx);
	s->cq = cq_ex(s->ctx, s->ch, IBV_WC_STANDARD_FLAGS);
	CHECK(s->pd && s->ch && s->cq);
	s->qp = qp_ex(s, IBV_QPT_RC, ALL_RC_OPS, 32);
	CHECK(s->qp);
	s->qpx = ibv_qp_to_qp_ex(s->qp);
	CHECK(s->qpx && (void *)s->qpx == (void *)s->qp);
	CHECK(ibv_query_gid(s->ctx, 1, 3, &s->gid) == 0);
	s->buf = aligned_alloc(4096, BUF);
	memset(s->buf, 0, BUF);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND);
	CHECK(s->mr);
}

static void read_comp(struct ibv_cq_ex *cq, struct comp *c) {
	c->status = cq->status;
	c->wr_id = cq->wr_id;
	c->opcode = ibv_wc_read_opcode(cq);
	c->byte_len = ibv_wc_read_byte_len(cq);
	c->qp_num = ibv_wc_read_qp_num(cq);
	c->flags = ibv_wc_read_wc_flags(cq);
	c->imm = ibv_wc_read_imm_data(cq);
	c->src_qp = ibv_wc_read_src_qp(cq);
	c->vendor_err = ibv_wc_read_vendor_err(cq);
	c->slid = ibv_wc_read_slid(cq);
	c->sl = ibv_wc_read_sl(cq);
	c->dlid_path_bits = ibv_wc_read_dlid_path_bits(cq);
}

/* Waits for the next completion of `cq` (a poll session of one). */
static int next_comp(struct ibv_cq_ex *cq, struct comp *c) {
	struct ibv_poll_cq_attr pa = { 0 };
	for (long i = 0; i < 100000000L; i++) {
		int r = ibv_start_poll(cq, &pa);
		if (r == 0) {
			read_comp(cq, c);
			ibv_end_poll(cq);
			return 1;
		}
		if (r != ENOENT) return 0;
		if ((i & 1023) == 0) usleep(10);
	}
	return 0;
}

/* The next completion is `wr_id`, successful, of `opcode`. */
static struct comp expect(struct ibv_cq_ex *cq, uint64_t wr_id, int opcode) {
	struct comp c = { .status = -1 };
	CHECK(next_comp(cq, &c));
	if (c.status != IBV_WC_SUCCESS || c.wr_id != wr_id || c.opcode != opcode)
		fprintf(stderr, "  got status %d wr_id %llu opcode %d, want wr_id %llu opcode %d\n", c.status,
			(unsigned long long)c.wr_id, c.opcode, (unsigned long long)wr_id, opcode);
	CHECK(c.status == IBV_WC_SUCCESS && c.wr_id == wr_id && c.opcode == opcode);
	return c;
}

static void post_recv(struct side *s, uint64_t wr_id, uint32_t off) {
	struct ibv_sge sg = { .addr = (uintptr_t)s->buf + off, .length = 4096, .lkey = s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sg, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(s->qp, &wr, &bad) == 0);
}

/* Starts a batch with the next WR's id and flags. */
static void start(struct ibv_qp_ex *x, uint64_t wr_id) {
	ibv_wr_start(x);
	x->wr_id = wr_id;
	x->wr_flags = IBV_SEND_SIGNALED;
}

static void creation_refusals(struct side *a, struct ibv_qp *plain) {
	errno = 0;
	CHECK(cq_ex(a->ctx, NULL, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) == NULL && errno == EOPNOTSUPP);
	errno = 0;
	CHECK(cq_ex(a->ctx, NULL, IBV_WC_EX_WITH_CVLAN) == NULL && errno == EOPNOTSUPP);
	struct ibv_cq_init_attr_ex bad_mask = { .cqe = 8, .comp_mask = 1 << 7 };
	errno = 0;
	CHECK(ibv_create_cq_ex(a->ctx, &bad_mask) == NULL && errno == EINVAL);
	struct ibv_cq_init_attr_ex overrun = { .cqe = 8, .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
		.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN };
	errno = 0;
	CHECK(ibv_create_cq_ex(a->ctx, &overrun) == NULL && errno == EOPNOTSUPP);
	errno = 0;
	CHECK(qp_ex(a, IBV_QPT_RC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO, 8) == NULL && errno == EOPNOTSUPP);
	errno = 0;
	CHECK(qp_ex(a, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE, 8) == NULL && errno == EOPNOTSUPP);
	errno = 0;
	CHECK(qp_ex(a, IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ, 8) == NULL && errno == EOPNOTSUPP);
	CHECK(ibv_qp_to_qp_ex(plain) == NULL);
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(a->ctx, NULL, &dx) == 0);
	CHECK((uint32_t)dx.device_cap_flags_ex == dx.orig_attr.device_cap_flags);
	CHECK(dx.completion_timestamp_mask == 0);
	CHECK(ibv_query_qp_data_in_order(a->qp, IBV_WR_RDMA_WRITE, 0) == 0);
	/* a CQ that takes only some fields */
	struct ibv_cq_ex *some = cq_ex(a->ctx, NULL, IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM);
	CHECK(some && ibv_destroy_cq(ibv_cq_ex_to_cq(some)) == 0);
	struct ibv_poll_cq_attr pa = { 0 };
	CHECK(ibv_start_poll(a->cq, &pa) == ENOENT);
}

/* Every operation, each checked on both sides. */
static void every_opcode(struct side *a, struct side *b) {
	struct ibv_qp_ex *x = a->qpx;
	uint64_t rb = (uintptr_t)b->buf;
	memset(a->buf, 0x5a, 256);
	start(x, 1);
	ibv_wr_rdma_write(x, b->mr->rkey, rb + 0x100);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 256);
	CHECK(ibv_wr_complete(x) == 0);
	expect(a->cq, 1, IBV_WC_RDMA_WRITE);
	CHECK(b->buf[0x100] == 0x5a && b->buf[0x1ff] == 0x5a && b->buf[0x200] == 0);

	post_recv(b, 100, 0x4000);
	start(x, 2);
	ibv_wr_rdma_write_imm(x, b->mr->rkey, rb + 0x300, htobe32(0x12345678));
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 16);
	CHECK(ibv_wr_complete(x) == 0);
	expect(a->cq, 2, IBV_WC_RDMA_WRITE);
	struct comp c = expect(b->cq, 100, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK((c.flags & IBV_WC_WITH_IMM) && be32toh(c.imm) == 0x12345678 && c.qp_num == b->qp->qp_num);
	CHECK(b->buf[0x300] == 0x5a && b->buf[0x30f] == 0x5a);

	/* SEND from a two-entry SGE list */
	memcpy(a->buf + 0x1000, "hello ", 6);
	memcpy(a->buf + 0x2000, "world", 6);
	struct ibv_sge two[2] = { { (uintptr_t)a->buf + 0x1000, 6, a->mr->lkey },
				  { (uintptr_t)a->buf + 0x2000, 6, a->mr->lkey } };
	post_recv(b, 101, 0x4000);
	start(x, 3);
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, 2, two);
	CHECK(ibv_wr_complete(x) == 0);
	expect(a->cq, 3, IBV_WC_SEND);
	c = expect(b->cq, 101, IBV_WC_RECV);
	CHECK(c.byte_len == 12 && strcmp(b->buf + 0x4000, "hello world") == 0 && !(c.flags & IBV_WC_WITH_IMM));

	/* SEND with immediate, its data inline (the buffer reused at once) */
	char tmp[32];
	strcpy(tmp, "inline!");
	post_recv(b, 102, 0x5000);
	start(x, 4);
	ibv_wr_send_imm(x, htobe32(77));
	ibv_wr_set_inline_data(x, tmp, 8);
	memset(tmp, 0, sizeof(tmp));
	CHECK(ibv_wr_complete(x) == 0);
	expect(a->cq, 4, IBV_WC_SEND);
	c = expect(b->cq, 102, IBV_WC_RECV);
	CHECK(c.byte_len == 8 && strcmp(b->buf + 0x5000, "inline!") == 0);
	CHECK((c.flags & IBV_WC_WITH_IMM) && be32toh(c.imm) == 77);

	/* inline data from a list of buffers */
	struct ibv_data_buf parts[3] = { { (void *)"ab", 2 }, { (void *)"", 0 }, { (void *)"cde", 4 } };
	post_recv(b, 103, 0x5000);
	start(x, 5);
	ibv_wr_send(x);
	ibv_wr_set_inline_data_list(x, 3, parts);
	CHECK(ibv_wr_complete(x) == 0);
	expect(a->cq, 5, IBV_WC_SEND);
	c = expect(b->cq, 103, IBV_WC_RECV);
	CHECK(c.byte_len == 6 && strcmp(b->buf + 0x5000, "abcde") == 0);

	/* READ */
	memcpy(b->buf + 0x6000, "read me", 8);
	start(x, 6);
	ibv_wr_rdma_read(x, b->mr->rkey, rb + 0x6000);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf + 0x6000, 8);
	CHECK(ibv_wr_complete(x) == 0);
	c = expect(a->cq, 6, IBV_WC_RDMA_READ);
	CHECK(c.byte_len == 8 && strcmp(a->buf + 0x6000, "read me") == 0);

	/* both atomics: the old value comes back, the new one stays */
	uint64_t *target = (uint64_t *)(b->buf + 0x7000), *old = (uint64_t *)(a->buf + 0x7000);
	*target = 5;
	start(x, 7);
	ibv_wr_atomic_cmp_swp(x, b->mr->rkey, rb + 0x7000, 5, 9);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)old, 8);
	CHECK(ibv_wr_complete(x) == 0);
	expect(a->cq, 7, IBV_WC_COMP_SWAP);
	CHECK(*old == 5 && *target == 9);
	start(x, 8);
	ibv_wr_atomic_fetch_add(x, b->mr->rkey, rb + 0x7000, 3);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)old, 8);
	CHECK(ibv_wr_complete(x) == 0);
	expect(a->cq, 8, IBV_WC_FETCH_ADD);
	CHECK(*old == 9 && *target == 12);
}

static int ud_ready(struct ibv_qp *qp) {
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x1111 };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

/* UD: ibv_wr_set_ud_addr names each SEND's destination; the receiver's
 * accessors give the GRH flag, the sender's QPN and the immediate. */
static void ud(struct side *a, struct side *b) {
	struct ibv_qp *qa = qp_ex(a, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM, 8);
	struct ibv_qp *qb = qp_ex(b, IBV_QPT_UD, IBV_QP_EX_WITH_SEND, 8);
	CHECK(qa && qb);
	if (!qa || !qb) return;
	CHECK(ud_ready(qa) == 0 && ud_ready(qb) == 0);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
		.grh = { .dgid = b->gid, .sgid_index = 3, .hop_limit = 64 } };
	struct ibv_ah *ah = ibv_create_ah(a->pd, &aa);
	CHECK(ah);
	struct ibv_sge sg = { (uintptr_t)b->buf + 0xe000, 40 + 64, b->mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 200, .sg_list = &sg, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(qb, &rw, &bad) == 0);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qa);
	start(x, 80);
	ibv_wr_send_imm(x, htobe32(5));
	ibv_wr_set_ud_addr(x, ah, qb->qp_num, 0x1111);
	ibv_wr_set_inline_data(x, (void *)"ud hello", 9);
	CHECK(ibv_wr_complete(x) == 0);
	expect(a->cq, 80, IBV_WC_SEND);
	struct comp c = expect(b->cq, 200, IBV_WC_RECV);
	CHECK(c.byte_len == 40 + 9 && strcmp(b->buf + 0xe000 + 40, "ud hello") == 0);
	CHECK((c.flags & IBV_WC_GRH) && (c.flags & IBV_WC_WITH_IMM) && be32toh(c.imm) == 5);
	CHECK(c.src_qp == qa->qp_num && c.qp_num == qb->qp_num);
	/* RoCEv2 over IPv4: sl gives the L3 header type as ConnectX reports it
	 * (UDP 0x8 | IPv4 0x2), and the GRH area's last 4 bytes are the IPv4
	 * destination, the receiver's own address (what UCX's UD checks) */
	CHECK(c.vendor_err == 0 && c.slid == 0 && c.sl == 0xa && c.dlid_path_bits == 0);
	CHECK(memcmp(b->buf + 0xe000 + 36, &b->gid.raw[12], 4) == 0);
	CHECK((((unsigned char *)b->buf)[0xe000 + 20] >> 4) == 4);
	start(x, 81);
	ibv_wr_send(x);                                           /* no address */
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 8);
	CHECK(ibv_wr_complete(x) == EINVAL);
	start(x, 82);
	ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf);    /* not on UD */
	CHECK(ibv_wr_complete(x) == EOPNOTSUPP);
	CHECK(ibv_destroy_ah(ah) == 0 && ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0);
}

/* A type 2 window bound with ibv_wr_bind_mw, written through, revoked by
 * ibv_wr_send_inv; bound again and revoked by ibv_wr_local_inv. */
static void windows(struct side *a, struct side *b) {
	struct ibv_mw *mw = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	CHECK(mw);
	if (!mw) return;
	struct ibv_mw_bind_info bi = { .mr = b->mr, .addr = (uintptr_t)b->buf + 0x8000, .length = 0x1000,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
	uint32_t k = ibv_inc_rkey(mw->rkey);
	start(b->qpx, 20);
	ibv_wr_bind_mw(b->qpx, mw, k, &bi);
	CHECK(ibv_wr_complete(b->qpx) == 0);
	expect(b->cq, 20, IBV_WC_BIND_MW);
	memset(a->buf + 0x8000, 0x33, 64);
	start(a->qpx, 21);
	ibv_wr_rdma_write(a->qpx, k, (uintptr_t)b->buf + 0x8100);
	ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)a->buf + 0x8000, 64);
	CHECK(ibv_wr_complete(a->qpx) == 0);
	expect(a->cq, 21, IBV_WC_RDMA_WRITE);
	CHECK(b->buf[0x8100] == 0x33 && b->buf[0x813f] == 0x33);
	post_recv(b, 104, 0x9000);
	start(a->qpx, 22);
	ibv_wr_send_inv(a->qpx, k);
	ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)a->buf, 4);
	CHECK(ibv_wr_complete(a->qpx) == 0);
	expect(a->cq, 22, IBV_WC_SEND);
	struct comp c = expect(b->cq, 104, IBV_WC_RECV);
	CHECK((c.flags & IBV_WC_WITH_INV) && c.imm == k);   /* the accessor of invalidated_rkey */
	k = ibv_inc_rkey(k);
	start(b->qpx, 23);
	ibv_wr_bind_mw(b->qpx, mw, k, &bi);
	CHECK(ibv_wr_complete(b->qpx) == 0);
	expect(b->cq, 23, IBV_WC_BIND_MW);
	start(b->qpx, 24);
	ibv_wr_local_inv(b->qpx, k);
	CHECK(ibv_wr_complete(b->qpx) == 0);
	expect(b->cq, 24, IBV_WC_LOCAL_INV);
	CHECK(ibv_dealloc_mw(mw) == 0);
}

/* Several work requests in one batch: posted together, completed in order. */
static void batch(struct side *a, struct side *b) {
	struct ibv_qp_ex *x = a->qpx;
	memset(a->buf + 0xa000, 0x44, 64);
	char first[32];
	memset(first, 0x55, sizeof(first));
	start(x, 30);
	ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf + 0xa000);
	ibv_wr_set_inline_data(x, first, 32);     /* two inline WRs in one batch */
	x->wr_id = 31;
	x->wr_flags = 0;                 /* unsignaled: no completion */
	ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf + 0xa020);
	ibv_wr_set_inline_data(x, a->buf + 0xa000, 32);
	x->wr_id = 32;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf + 0xa040);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf + 0xa000, 8);
	CHECK(ibv_wr_complete(x) == 0);
	struct ibv_poll_cq_attr pa = { 0 };
	int seen = 0;
	uint64_t ids[2] = { 0, 0 };
	for (long i = 0; i < 100000000L && seen < 2; i++) {
		if (ibv_start_poll(a->cq, &pa) != 0) {
			if ((i & 1023) == 0) usleep(10);
			continue;
		}
		do {
			CHECK(a->cq->status == IBV_WC_SUCCESS);
			if (seen < 2) ids[seen] = a->cq->wr_id;
			seen++;
		} while (ibv_next_poll(a->cq) == 0);
		ibv_end_poll(a->cq);
	}
	CHECK(seen == 2 && ids[0] == 30 && ids[1] == 32);
	CHECK(b->buf[0xa000] == 0x55 && b->buf[0xa01f] == 0x55 && b->buf[0xa020] == 0x44 && b->buf[0xa03f] == 0x44);
	CHECK(b->buf[0xa047] == 0x44 && b->buf[0xa048] == 0);
}

/* A marker write that must be the next completion: nothing a bad
 * sequence left behind was posted. */
static void still_works(struct side *a, struct side *b, uint64_t id) {
	start(a->qpx, id);
	ibv_wr_rdma_write(a->qpx, b->mr->rkey, (uintptr_t)b->buf + 0xb000);
	ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)a->buf, 8);
	CHECK(ibv_wr_complete(a->qpx) == 0);
	expect(a->cq, id, IBV_WC_RDMA_WRITE);
	struct ibv_poll_cq_attr pa = { 0 };
	CHECK(ibv_start_poll(a->cq, &pa) == ENOENT);
}

static void bad_sequences(struct side *a, struct side *b) {
	struct ibv_qp_ex *x = a->qpx;
	CHECK(ibv_wr_complete(x) == EINVAL);                      /* no wr_start */
	struct ibv_sge nine[9];
	for (int i = 0; i < 9; i++)
		nine[i] = (struct ibv_sge){ (uintptr_t)a->buf + i * 16, 16, a->mr->lkey };
	start(x, 40);
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, 9, nine);                          /* past max_send_sge */
	CHECK(ibv_wr_complete(x) == ENOSPC);
	char big[1024] = { 0 };
	start(x, 41);
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, big, sizeof(big));              /* past max_inline_data */
	CHECK(ibv_wr_complete(x) == ENOSPC);
	start(x, 42);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 8);     /* a setter before any builder */
	CHECK(ibv_wr_complete(x) == EINVAL);
	start(x, 43);
	ibv_wr_send_tso(x, big, 16, 1000);                        /* an operation it does not have */
	CHECK(ibv_wr_complete(x) == EOPNOTSUPP);
	start(x, 44);
	ibv_wr_set_xrc_srqn(x, 1);
	CHECK(ibv_wr_complete(x) == EOPNOTSUPP);
	start(x, 45);
	ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf);
	ibv_wr_start(x);                                          /* nested */
	CHECK(ibv_wr_complete(x) == EINVAL);
	start(x, 46);
	ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 8);
	struct ibv_sge sg = { (uintptr_t)a->buf, 8, a->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 47, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad = NULL;
	CHECK(ibv_post_send(a->qp, &wr, &bad) == EINVAL && bad == &wr); /* post_send inside a batch */
	ibv_wr_abort(x);                                          /* nothing posted */
	ibv_wr_abort(x);                                          /* twice: harmless */
	still_works(a, b, 48);

	/* a QP made for SENDs only, still in RESET */
	struct ibv_qp *sq = qp_ex(a, IBV_QPT_RC, IBV_QP_EX_WITH_SEND, 4);
	CHECK(sq);
	if (!sq) return;
	struct ibv_qp_ex *sx = ibv_qp_to_qp_ex(sq);
	start(sx, 50);
	ibv_wr_rdma_write(sx, b->mr->rkey, (uintptr_t)b->buf);    /* not among its send_ops_flags */
	ibv_wr_set_sge(sx, a->mr->lkey, (uintptr_t)a->buf, 8);
	CHECK(ibv_wr_complete(sx) == EOPNOTSUPP);
	start(sx, 51);
	ibv_wr_send(sx);
	CHECK(ibv_wr_complete(sx) == EINVAL);                     /* RESET: not ready to send */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	CHECK(ibv_query_qp(sq, &qa, IBV_QP_CAP, &qia) == 0);
	start(sx, 52);
	for (uint32_t i = 0; i <= qia.cap.max_send_wr; i++)      /* one more than the queue holds */
		ibv_wr_send(sx);
	CHECK(ibv_wr_complete(sx) == ENOSPC);
	CHECK(ibv_destroy_qp(sq) == 0);
	still_works(a, b, 53);
}

static void write_with(struct side *a, struct side *b, uint64_t id, uint32_t rkey, uint64_t raddr, char v) {
	memset(a->buf + 0xc000, v, 16);
	start(a->qpx, id);
	ibv_wr_rdma_write(a->qpx, rkey, raddr);
	ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)a->buf + 0xc000, 16);
	CHECK(ibv_wr_complete(a->qpx) == 0);
	expect(a->cq, id, IBV_WC_RDMA_WRITE);
}

static void rereg(struct side *a, struct side *b) {
	char *r = aligned_alloc(4096, 8192), *r2 = aligned_alloc(4096, 8192);
	memset(r, 0, 8192);
	memset(r2, 0, 8192);
	struct ibv_mr *mr = ibv_reg_mr(b->pd, r, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);
	if (!mr) return;
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 1 << 3, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, b->pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE) ==
	      IBV_REREG_MR_ERR_INPUT && errno == EINVAL);         /* access without CHANGE_ACCESS */
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE) ==
	      IBV_REREG_MR_ERR_CMD && errno == EINVAL);           /* remote write without local write */
	/* remote write granted: the peer writes with the key it had (the
	 * keys stay, as with rxe) */
	uint32_t lkey = mr->lkey, rkey = mr->rkey;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0);
	CHECK(mr->lkey == lkey && mr->rkey == rkey);
	write_with(a, b, 60, mr->rkey, (uintptr_t)r + 8, 0x61);
	CHECK(r[8] == 0x61 && r[23] == 0x61 && r[24] == 0);
	/* another PD and back */
	struct ibv_pd *pd2 = ibv_alloc_pd(b->ctx);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0 && mr->pd == pd2);
	CHECK(ibv_dealloc_pd(pd2) == EBUSY);                      /* the region is on it now */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, b->pd, NULL, 0, 0) == 0 && mr->pd == b->pd);
	CHECK(ibv_dealloc_pd(pd2) == 0);
	/* another range: the data lands in the new buffer */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, r2, 8192, 0) == 0);
	CHECK(mr->addr == r2 && mr->length == 8192 && mr->rkey == rkey);
	write_with(a, b, 61, mr->rkey, (uintptr_t)r2 + 4096, 0x62);
	CHECK(r2[4096] == 0x62 && r2[4111] == 0x62 && r[4096] == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
}

/* ibv_resize_cq with two completions waiting in the ring: refused below
 * them, and a larger ring still hands them out in order. */
static void resize(struct side *a, struct side *b) {
	struct ibv_cq *cq = ibv_cq_ex_to_cq(a->cq);
	for (uint64_t id = 70; id < 72; id++) {
		CHECK(ibv_req_notify_cq(cq, 0) == 0);
		start(a->qpx, id);
		ibv_wr_rdma_write(a->qpx, b->mr->rkey, (uintptr_t)b->buf + 0xd000);
		ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)a->buf, 8);
		CHECK(ibv_wr_complete(a->qpx) == 0);
		struct ibv_cq *ev;
		void *evctx;
		CHECK(ibv_get_cq_event(a->ch, &ev, &evctx) == 0 && ev == cq);   /* written to the ring */
		ibv_ack_cq_events(cq, 1);
	}
	CHECK(ibv_resize_cq(cq, 1) == EINVAL);
	CHECK(ibv_resize_cq(cq, 0) == EINVAL);
	CHECK(ibv_resize_cq(cq, 1 << 30) == EINVAL);
	CHECK(ibv_resize_cq(cq, 200) == 0 && cq->cqe >= 200);
	expect(a->cq, 70, IBV_WC_RDMA_WRITE);
	expect(a->cq, 71, IBV_WC_RDMA_WRITE);
	CHECK(ibv_resize_cq(cq, 2) == 0 && cq->cqe >= 2 && cq->cqe < 200);
	still_works(a, b, 72);
}

int main(void) {
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 2);
	if (!list || n != 2) return 1;
	struct side a, b;
	open_side(&a, list[0]);
	open_side(&b, list[1]);
	struct ibv_qp_init_attr pa = { .send_cq = ibv_cq_ex_to_cq(a.cq), .recv_cq = ibv_cq_ex_to_cq(a.cq),
		.qp_type = IBV_QPT_RC, .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *plain = ibv_create_qp(a.pd, &pa);
	CHECK(plain);
	creation_refusals(&a, plain);
	CHECK(ibv_destroy_qp(plain) == 0);
	int acc = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
	CHECK(rc_connect(a.qp, b.qp->qp_num, b.gid, acc) == 0);
	CHECK(rc_connect(b.qp, a.qp->qp_num, a.gid, acc) == 0);
	every_opcode(&a, &b);
	ud(&a, &b);
	windows(&a, &b);
	batch(&a, &b);
	bad_sequences(&a, &b);
	rereg(&a, &b);
	resize(&a, &b);
	printf("%d failures\n", fails);
	return fails != 0;
}
