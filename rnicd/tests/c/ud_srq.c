/* Two devices, one process: a UD SEND through an address handle (source
 * QP, GRH flag and data checked), then two RC QPs on one SRQ that both
 * receive SENDs with the SRQ limit armed (SRQ_LIMIT_REACHED read back),
 * then a WRITE the responder refuses (QP_ACCESS_ERR and
 * QP_LAST_WQE_REACHED for its QP); prints "C UD SRQ OK" when every check
 * passes. */
#define _POSIX_C_SOURCE 199309L
#include "softrnic.h"
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define LEN (1 << 20)
#define QKEY 0x11112222u
#define MSG 300
#define CHECK(c, ...) do { if (!(c)) { printf("C FAIL: " __VA_ARGS__); printf("\n"); return 1; } } while (0)

struct side {
    struct srnic_context *ctx;
    struct srnic_device_attr attr;
    struct srnic_pd *pd;
    unsigned char *buf;
    struct srnic_mr *mr;
    struct srnic_cq *cq;
};

static int setup(struct side *s, const char *path) {
    s->ctx = srnic_open_device(path);
    if (!s->ctx || srnic_query_device(s->ctx, &s->attr)) return -1;
    s->pd = srnic_alloc_pd(s->ctx);
    s->buf = srnic_alloc_buf(s->pd, LEN);
    if (!s->pd || !s->buf) return -1;
    s->mr = srnic_reg_mr(s->pd, s->buf, LEN, SRNIC_ACCESS_LOCAL_WRITE);
    s->cq = srnic_create_cq(s->ctx, 64);
    return s->mr && s->cq ? 0 : -1;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Polls one completion for up to `secs`; 0 when one arrived. */
static int wait1(struct srnic_cq *cq, struct srnic_wc_ex *wc, double secs) {
    double t0 = now();
    while (now() - t0 < secs)
        if (srnic_poll_cq_ex(cq, 1, wc) == 1) return 0;
    return -1;
}

/* wait1 on b's CQ; a completion of the destroyed UD QP (its receives,
 * wr_id 10..17) fails: none may reach the CQ after srnic_destroy_qp
 * returns */
static int wait_past_ud(struct srnic_cq *cq, struct srnic_wc_ex *wc, double secs) {
    if (wait1(cq, wc, secs) != 0) return -1;
    if (wc->wr_id >= 10 && wc->wr_id < 18) {
        fprintf(stderr, "a completion of the destroyed UD QP: wr_id %llu status %u\n",
                (unsigned long long)wc->wr_id, wc->status);
        return -1;
    }
    return 0;
}

static int recv_on(struct srnic_qp *qp, struct srnic_srq *srq, struct side *s, uint64_t id, uint64_t off) {
    struct srnic_sge sge = { (uint64_t)(uintptr_t)(s->buf + off), 4096, srnic_mr_lkey(s->mr) };
    struct srnic_recv_wr wr = { id, &sge, 1 };
    return srq ? srnic_post_srq_recv(srq, &wr) : srnic_post_recv(qp, &wr);
}

static int send_from(struct srnic_qp *qp, struct side *s, uint64_t id, uint64_t off, uint32_t len,
                     struct srnic_ah *ah, uint32_t rqpn) {
    struct srnic_sge sge = { (uint64_t)(uintptr_t)(s->buf + off), len, srnic_mr_lkey(s->mr) };
    struct srnic_send_wr wr;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = id;
    wr.opcode = SRNIC_WR_SEND;
    wr.send_flags = SRNIC_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ah ? srnic_post_send_ud(qp, &wr, ah, rqpn, QKEY) : srnic_post_send(qp, &wr);
}

int main(int argc, char **argv) {
    struct side a, b;
    struct srnic_wc_ex wc;
    CHECK(argc == 3, "usage: ud_srq SOCK_A SOCK_B");
    CHECK(setup(&a, argv[1]) == 0, "setup a");
    CHECK(setup(&b, argv[2]) == 0, "setup b");

    /* UD */
    struct srnic_qp_init_attr_ex ud = { a.cq, a.cq, NULL, 16, 16, 0, SRNIC_QPT_UD };
    struct srnic_qp *ua = srnic_create_qp_ex(a.pd, &ud);
    ud.send_cq = ud.recv_cq = b.cq;
    struct srnic_qp *ub = srnic_create_qp_ex(b.pd, &ud);
    CHECK(ua && ub, "create UD QPs");
    CHECK(srnic_ready_ud_qp(ua, QKEY, 0) == 0 && srnic_ready_ud_qp(ub, QKEY, 0) == 0, "UD to RTS");
    struct srnic_ah_attr aa;
    memset(&aa, 0, sizeof aa);
    memcpy(aa.dgid, b.attr.gid, 16);
    memcpy(aa.dmac, b.attr.mac, 6);
    struct srnic_ah *ah = srnic_create_ah(a.pd, &aa);
    CHECK(ah, "create AH");
    for (int i = 0; i < MSG; i++) a.buf[i] = (unsigned char)(i * 5 + 9);
    for (int i = 0; i < 8; i++) CHECK(recv_on(ub, NULL, &b, 10 + i, 0x10000 + i * 4096) == 0, "UD recv");
    /* the daemon takes posted receives asynchronously and UD drops what
     * finds no receive: resend until one arrives */
    int got = 0;
    for (int t = 0; t < 8 && !got; t++) {
        CHECK(send_from(ua, &a, 1, 0, MSG, ah, srnic_qp_num(ub)) == 0, "UD send");
        CHECK(wait1(a.cq, &wc, 10) == 0 && wc.status == SRNIC_WC_SUCCESS, "UD send completion %u", wc.status);
        got = wait1(b.cq, &wc, 0.5) == 0;
    }
    CHECK(got, "no UD receive");
    CHECK(wc.status == SRNIC_WC_SUCCESS && wc.opcode == SRNIC_WC_RECV, "UD recv status %u", wc.status);
    CHECK(wc.src_qp == srnic_qp_num(ua), "src_qp %u", wc.src_qp);
    CHECK(wc.wc_flags & SRNIC_WC_GRH, "GRH flag");
    CHECK(wc.byte_len == 40 + MSG, "byte_len %u", wc.byte_len);
    uint64_t slot = 0x10000 + (wc.wr_id - 10) * 4096;
    CHECK(memcmp(b.buf + slot + 40, a.buf, MSG) == 0, "UD data");
    CHECK(srnic_destroy_ah(ah) == 0, "destroy AH");
    CHECK(srnic_destroy_qp(ua) == 0 && srnic_destroy_qp(ub) == 0, "destroy UD QPs");
    while (srnic_poll_cq_ex(b.cq, 1, &wc) == 1) {}

    /* SRQ: b's two RC QPs share one SRQ */
    struct srnic_srq *srq = srnic_create_srq(b.pd, 16);
    CHECK(srq, "create SRQ");
    struct srnic_qp_init_attr ra = { a.cq, a.cq, 16, 16, 1 };
    struct srnic_qp_init_attr_ex rb = { b.cq, b.cq, srq, 16, 0, 1, SRNIC_QPT_RC };
    struct srnic_qp *qa[2], *qb[2];
    for (int i = 0; i < 2; i++) {
        qa[i] = srnic_create_qp(a.pd, &ra);
        qb[i] = srnic_create_qp_ex(b.pd, &rb);
        CHECK(qa[i] && qb[i], "create RC QPs");
        CHECK(srnic_connect_qp(qa[i], b.attr.gid, b.attr.mac, srnic_qp_num(qb[i]), 1, 2) == 0, "connect a");
        CHECK(srnic_connect_qp(qb[i], a.attr.gid, a.attr.mac, srnic_qp_num(qa[i]), 2, 1) == 0, "connect b");
    }
    for (int i = 0; i < 4; i++) CHECK(recv_on(NULL, srq, &b, 20 + i, 0x20000 + i * 4096) == 0, "SRQ recv");
    /* the SRQ limit and the async event API: bad arguments first */
    struct srnic_async_event ev;
    uint32_t max_wr = 0, limit = 99;
    CHECK(srnic_modify_srq(NULL, 1) == EINVAL, "modify_srq(NULL)");
    CHECK(srnic_query_srq(NULL, &max_wr, &limit) == EINVAL, "query_srq(NULL)");
    CHECK(srnic_get_async_event(NULL, &ev, 0) == -EINVAL, "get_async_event(NULL ctx)");
    CHECK(srnic_get_async_event(b.ctx, NULL, 0) == -EINVAL, "get_async_event(NULL ev)");
    CHECK(srnic_async_event_fd(NULL) == -1, "async_event_fd(NULL)");
    CHECK(srnic_query_srq(srq, &max_wr, &limit) == 0 && max_wr >= 16 && limit == 0,
          "query_srq: max_wr %u limit %u", max_wr, limit);
    CHECK(srnic_modify_srq(srq, max_wr + 1) == EINVAL, "a limit above the SRQ's size");
    CHECK(srnic_modify_srq(srq, 3) == 0, "arm the SRQ limit");
    CHECK(srnic_query_srq(srq, NULL, &limit) == 0 && limit == 3, "armed limit %u", limit);
    int afd = srnic_async_event_fd(b.ctx);
    CHECK(afd >= 0, "async_event_fd");
    CHECK(srnic_get_async_event(b.ctx, &ev, 0) == 0, "no event yet");
    for (int k = 0; k < 4; k++) {
        memset(a.buf + 0x40000 + k * 4096, 0x30 + k, 64);
        CHECK(send_from(qa[k % 2], &a, 30 + k, 0x40000 + k * 4096, 64, NULL, 0) == 0, "RC send");
    }
    for (int k = 0; k < 4; k++)
        CHECK(wait1(a.cq, &wc, 10) == 0 && wc.status == SRNIC_WC_SUCCESS, "RC send completion");
    int per_qp[2] = { 0, 0 };
    for (int k = 0; k < 4; k++) {
        CHECK(wait_past_ud(b.cq, &wc, 10) == 0 && wc.status == SRNIC_WC_SUCCESS,
              "SRQ completion %u (wr_id %llu)", wc.status, (unsigned long long)wc.wr_id);
        CHECK(wc.wr_id >= 20 && wc.wr_id < 24 && wc.byte_len == 64, "SRQ wc");
        unsigned char m = b.buf[0x20000 + (wc.wr_id - 20) * 4096];
        CHECK(m >= 0x30 && m < 0x34, "SRQ data %u", m);
        CHECK(wc.qp_num == srnic_qp_num(qb[(m - 0x30) % 2]), "message %u on QP %u", m, wc.qp_num);
        per_qp[(m - 0x30) % 2]++;
    }
    CHECK(per_qp[0] == 2 && per_qp[1] == 2, "per QP %d %d", per_qp[0], per_qp[1]);
    /* fewer than 3 left: SRQ_LIMIT_REACHED once, and the limit disarmed */
    struct pollfd pfd = { afd, POLLIN, 0 };
    CHECK(poll(&pfd, 1, 10000) == 1 && (pfd.revents & POLLIN), "async fd readable");
    CHECK(srnic_get_async_event(b.ctx, &ev, 10000) == 1, "an async event");
    CHECK(ev.event_type == SRNIC_EVENT_SRQ_LIMIT_REACHED && ev.srq_num == srnic_srq_num(srq)
          && ev.qp_num == 0, "SRQ limit event: type %u srq %u", ev.event_type, ev.srq_num);
    CHECK(srnic_query_srq(srq, NULL, &limit) == 0 && limit == 0, "disarmed: %u", limit);
    CHECK(srnic_get_async_event(b.ctx, &ev, 0) == 0, "one SRQ limit event");
    CHECK(srnic_get_async_event(a.ctx, &ev, 0) == 0, "nothing for the other process's objects");

    /* b's memory has no remote write access: the responder NAKs the WRITE
     * and fails its QP: QP_ACCESS_ERR, then QP_LAST_WQE_REACHED (on an SRQ) */
    {
        struct srnic_sge sge = { (uint64_t)(uintptr_t)a.buf, 8, srnic_mr_lkey(a.mr) };
        struct srnic_send_wr wr;
        memset(&wr, 0, sizeof wr);
        wr.wr_id = 77;
        wr.opcode = SRNIC_WR_RDMA_WRITE;
        wr.send_flags = SRNIC_SEND_SIGNALED;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.remote_addr = (uint64_t)(uintptr_t)b.buf;
        wr.rkey = srnic_mr_rkey(b.mr);
        CHECK(srnic_post_send(qa[0], &wr) == 0, "post WRITE");
        CHECK(wait1(a.cq, &wc, 10) == 0 && wc.status == SRNIC_WC_REM_ACCESS_ERR,
              "WRITE refused: status %u", wc.status);
    }
    uint32_t want[2] = { SRNIC_EVENT_QP_ACCESS_ERR, SRNIC_EVENT_QP_LAST_WQE_REACHED };
    for (int k = 0; k < 2; k++) {
        CHECK(srnic_get_async_event(b.ctx, &ev, 10000) == 1, "QP event %d", k);
        CHECK(ev.event_type == want[k] && ev.qp_num == srnic_qp_num(qb[0]),
              "QP event %d: type %u qp %u", k, ev.event_type, ev.qp_num);
    }
    CHECK(srnic_get_async_event(a.ctx, &ev, 0) == 0, "the requester gets a completion, no event");
    CHECK(srnic_destroy_srq(srq) != 0, "the SRQ is busy while QPs use it");
    for (int i = 0; i < 2; i++) CHECK(srnic_destroy_qp(qb[i]) == 0, "destroy QP");
    CHECK(srnic_destroy_srq(srq) == 0, "destroy SRQ");
    printf("C UD SRQ OK\n");
    return 0;
}
