/* Compiled against rdma-core's <infiniband/verbs.h> and linked to the
 * softrnic drop-in: what a program sees when its device fails under it.
 * It sets up two RC QPs (t0: A, t1: B), completes one SEND, leaves two
 * SENDs (one unsignaled) stuck behind RNR NAKs and two receives posted,
 * arms A's CQ on a completion channel, prints READY and waits there; the
 * test then kills rnicd. Then: the channel wakes with A's CQ, the async
 * fd reports IBV_EVENT_DEVICE_FATAL, every outstanding WR (and only
 * those) completes with IBV_WC_WR_FLUSH_ERR, every later verb fails,
 * and teardown succeeds. Exit 0 and "0 failures" when all of it holds. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "rc_connect.h"

static int fails;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: %s (errno %d)\n", __FILE__, __LINE__, #c, errno); fails++; } } while (0)

struct side {
	struct ibv_context *ctx; struct ibv_pd *pd; struct ibv_comp_channel *ch;
	struct ibv_cq *cq; struct ibv_qp *qp; struct ibv_mr *mr; union ibv_gid gid; char *buf;
};

static int open_side(struct side *s, struct ibv_device *d) {
	s->ctx = ibv_open_device(d);
	if (!s->ctx) return -1;
	s->pd = ibv_alloc_pd(s->ctx);
	s->ch = ibv_create_comp_channel(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 64, NULL, s->ch, 0);
	s->buf = calloc(1, 4096);
	s->mr = ibv_reg_mr(s->pd, s->buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr a = { .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 } };
	s->qp = ibv_create_qp(s->pd, &a);
	if (!s->pd || !s->ch || !s->cq || !s->mr || !s->qp) return -1;
	return ibv_query_gid(s->ctx, 1, 3, &s->gid);
}

static int connect_qp(struct side *s, struct side *peer) {
	return rc_connect(s->qp, peer->qp->qp_num, peer->gid, 0);
}

static int post_recv(struct side *s, uint64_t id) {
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf + 2048, .length = 1024, .lkey = s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_recv(s->qp, &wr, &bad);
}

static int post_send(struct side *s, uint64_t id, unsigned flags) {
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf, .length = 64, .lkey = s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = flags }, *bad;
	return ibv_post_send(s->qp, &wr, &bad);
}

/* One completion, polled until it comes (the caller's alarm bounds it). */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc) {
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n) return n;
		usleep(100);
	}
}

/* After the failure: A's CQ gives exactly the outstanding WRs, flushed. */
static void check_flushes(struct side *a) {
	uint64_t want[] = { 2, 3, 101, 102 };
	int seen[4] = { 0 }, extra = 0, n;
	struct ibv_wc wc[3];
	while ((n = ibv_poll_cq(a->cq, 3, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			int k = -1;
			for (int j = 0; j < 4; j++)
				if (wc[i].wr_id == want[j]) k = j;
			printf("flushed wr_id %llu status %s qp %s\n", (unsigned long long)wc[i].wr_id,
			       ibv_wc_status_str(wc[i].status), wc[i].qp_num == a->qp->qp_num ? "A" : "?");
			CHECK(wc[i].status == IBV_WC_WR_FLUSH_ERR);
			CHECK(wc[i].qp_num == a->qp->qp_num);
			if (k < 0) extra++; else seen[k]++;
		}
	}
	CHECK(n < 0); /* drained: polling a failed device is an error */
	CHECK(extra == 0);
	for (int j = 0; j < 4; j++)
		CHECK(seen[j] == 1);
}

/* After the failure: every verb that needs the device fails; teardown works. */
static void check_later_calls(struct side *a, struct side *b) {
	struct ibv_async_event ev;
	struct ibv_port_attr pa;
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };
	struct ibv_cq *cq;
	void *cq_ctx;
	CHECK(post_send(a, 9, IBV_SEND_SIGNALED) != 0);
	CHECK(post_recv(a, 9) != 0);
	CHECK(ibv_req_notify_cq(a->cq, 0) != 0);
	CHECK(ibv_poll_cq(b->cq, 1, (struct ibv_wc[1]){ 0 }) < 0);
	CHECK(ibv_alloc_pd(a->ctx) == NULL);
	CHECK(ibv_reg_mr(a->pd, a->buf, 64, IBV_ACCESS_LOCAL_WRITE) == NULL);
	CHECK(ibv_create_cq(a->ctx, 4, NULL, NULL, 0) == NULL);
	CHECK(ibv_query_port(a->ctx, 1, &pa) != 0);
	CHECK(ibv_modify_qp(a->qp, &qa, IBV_QP_STATE) != 0);
	/* the fatal event came once; nothing more will come */
	CHECK(ibv_get_async_event(a->ctx, &ev) == -1 && errno == EIO);
	CHECK(ibv_get_cq_event(a->ch, &cq, &cq_ctx) == -1 && errno == EIO);
	struct side *s[2] = { a, b };
	for (int i = 0; i < 2; i++) {
		CHECK(ibv_destroy_qp(s[i]->qp) == 0);
		CHECK(ibv_destroy_cq(s[i]->cq) == 0);
		CHECK(ibv_destroy_comp_channel(s[i]->ch) == 0);
		CHECK(ibv_dereg_mr(s[i]->mr) == 0);
		CHECK(ibv_dealloc_pd(s[i]->pd) == 0);
		CHECK(ibv_close_device(s[i]->ctx) == 0);
	}
}

int main(void) {
	alarm(60); /* a hang is a failure, not a stuck test */
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct side a = { 0 }, b = { 0 };
	if (n < 2 || open_side(&a, l[0]) || open_side(&b, l[1]) || connect_qp(&a, &b) || connect_qp(&b, &a)) {
		fprintf(stderr, "setup failed (errno %d)\n", errno);
		return 2;
	}
	struct ibv_wc wc;
	/* one SEND that completes: it must not come back flushed */
	CHECK(post_recv(&b, 201) == 0);
	CHECK(post_send(&a, 1, IBV_SEND_SIGNALED) == 0);
	CHECK(wait_wc(a.cq, &wc) == 1 && wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS);
	CHECK(wait_wc(b.cq, &wc) == 1 && wc.wr_id == 201 && wc.status == IBV_WC_SUCCESS);
	/* outstanding when the device fails: two receives, and two SENDs
	 * (the first unsignaled) that B, with no receive, answers with RNR NAKs */
	CHECK(post_recv(&a, 101) == 0);
	CHECK(post_recv(&a, 102) == 0);
	CHECK(post_send(&a, 2, 0) == 0);
	CHECK(post_send(&a, 3, IBV_SEND_SIGNALED) == 0);
	CHECK(ibv_req_notify_cq(a.cq, 0) == 0);
	CHECK(ibv_poll_cq(a.cq, 1, &wc) == 0);
	printf("READY\n");
	fflush(stdout);

	/* the test kills rnicd now: the channel wakes with A's CQ */
	struct ibv_cq *cq = NULL;
	void *cq_ctx;
	CHECK(ibv_get_cq_event(a.ch, &cq, &cq_ctx) == 0 && cq == a.cq);
	if (cq) ibv_ack_cq_events(cq, 1);
	/* the async fd turns readable, with the device's fatal event */
	struct pollfd p = { .fd = a.ctx->async_fd, .events = POLLIN };
	CHECK(poll(&p, 1, 10000) == 1);
	struct ibv_async_event ev;
	for (int i = 0; i < 2; i++) {
		struct ibv_context *c = i ? b.ctx : a.ctx;
		CHECK(ibv_get_async_event(c, &ev) == 0 && ev.event_type == IBV_EVENT_DEVICE_FATAL);
		printf("%s: %s\n", i ? "B" : "A", ibv_event_type_str(ev.event_type));
		ibv_ack_async_event(&ev);
	}
	check_flushes(&a);
	check_later_calls(&a, &b);
	ibv_free_device_list(l);
	printf("%d failures\n", fails);
	return fails != 0;
}
