/* Two devices, one process: WRITE, SEND/RECV, READ, FETCH_ADD through the
 * softrnic C API; prints "C OK" when every byte checks out. */
#include "softrnic.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEN (1 << 20)
#define CHECK(c, ...) do { if (!(c)) { printf("C FAIL: " __VA_ARGS__); printf("\n"); return 1; } } while (0)

struct side {
    struct srnic_context *ctx;
    struct srnic_device_attr attr;
    struct srnic_pd *pd;
    unsigned char *buf;
    struct srnic_mr *mr;
    struct srnic_cq *cq;
    struct srnic_qp *qp;
};

static int setup(struct side *s, const char *path) {
    s->ctx = srnic_open_device(path);
    if (!s->ctx) return -1;
    if (srnic_query_device(s->ctx, &s->attr)) return -1;
    s->pd = srnic_alloc_pd(s->ctx);
    s->buf = srnic_alloc_buf(s->pd, LEN);
    if (!s->pd || !s->buf) return -1;
    s->mr = srnic_reg_mr(s->pd, s->buf, LEN, SRNIC_ACCESS_LOCAL_WRITE | SRNIC_ACCESS_REMOTE_WRITE |
                                             SRNIC_ACCESS_REMOTE_READ | SRNIC_ACCESS_REMOTE_ATOMIC);
    s->cq = srnic_create_cq(s->ctx, 64);
    if (!s->mr || !s->cq) return -1;
    struct srnic_qp_init_attr qa = { s->cq, s->cq, 16, 16, 1 };
    s->qp = srnic_create_qp(s->pd, &qa);
    return s->qp ? 0 : -1;
}

static int wait1(struct srnic_cq *cq, struct srnic_wc *wc) {
    time_t t0 = time(NULL);
    for (;;) {
        int n = srnic_poll_cq(cq, 1, wc);
        if (n == 1) return 0;
        if (time(NULL) - t0 > 10) return -1;
    }
}

int main(int argc, char **argv) {
    struct side a, b;
    struct srnic_wc wc;
    CHECK(argc == 3, "usage: verbs SOCK_A SOCK_B");
    CHECK(setup(&a, argv[1]) == 0, "setup a");
    CHECK(setup(&b, argv[2]) == 0, "setup b");
    struct srnic_port_attr pa;
    memset(&pa, 0xff, sizeof pa);
    CHECK(srnic_query_port(a.ctx, 1, &pa) == 0, "query port 1");
    CHECK(pa.state == SRNIC_PORT_ACTIVE && pa.active_mtu == 4096 && pa.max_mtu == 4096 &&
              pa.link_speed_bps == 100000000000ULL,
          "port attr state %u mtu %u/%u speed %llu", pa.state, pa.active_mtu, pa.max_mtu,
          (unsigned long long)pa.link_speed_bps);
    CHECK(srnic_query_port(a.ctx, 2, &pa) == EINVAL, "port 2 is refused");
    CHECK(srnic_query_port(a.ctx, 1, NULL) == EINVAL, "NULL attr is refused");
    CHECK(srnic_connect_qp(a.qp, b.attr.gid, b.attr.mac, srnic_qp_num(b.qp), 1, 2) == 0, "connect a");
    CHECK(srnic_connect_qp(b.qp, a.attr.gid, a.attr.mac, srnic_qp_num(a.qp), 2, 1) == 0, "connect b");
    for (int i = 0; i < 100000; i++) a.buf[i] = (unsigned char)(i * 7 + 3);
    for (int i = 0; i < 5000; i++) b.buf[0x80000 + i] = (unsigned char)(i * 11 + 1);
    uint64_t seven = 7;
    memcpy(b.buf + 0xf0000, &seven, 8);

    /* WRITE 100000 bytes a -> b */
    struct srnic_sge sge = { (uint64_t)(uintptr_t)a.buf, 100000, srnic_mr_lkey(a.mr) };
    struct srnic_send_wr wr = { 0 };
    wr.wr_id = 1; wr.opcode = SRNIC_WR_RDMA_WRITE; wr.send_flags = SRNIC_SEND_SIGNALED;
    wr.sg_list = &sge; wr.num_sge = 1;
    wr.remote_addr = (uint64_t)(uintptr_t)b.buf; wr.rkey = srnic_mr_rkey(b.mr);
    CHECK(srnic_post_send(a.qp, &wr) == 0, "post write");
    CHECK(wait1(a.cq, &wc) == 0 && wc.status == SRNIC_WC_SUCCESS && wc.wr_id == 1, "write wc %u", wc.status);
    CHECK(memcmp(a.buf, b.buf, 100000) == 0, "write data");

    /* SEND 3000 bytes with immediate a -> b; b sleeps on a completion event */
    struct srnic_sge rsge = { (uint64_t)(uintptr_t)(b.buf + 0x40000), 4096, srnic_mr_lkey(b.mr) };
    struct srnic_recv_wr rwr = { 9, &rsge, 1 };
    CHECK(srnic_post_recv(b.qp, &rwr) == 0, "post recv");
    CHECK(srnic_cq_event_fd(b.cq) == -1 && srnic_get_cq_event(b.cq, 0) < 0, "events before a request");
    CHECK(srnic_req_notify_cq(b.cq, 0) == 0 && srnic_cq_event_fd(b.cq) >= 0, "req notify");
    CHECK(srnic_poll_cq(b.cq, 1, &wc) == 0, "nothing yet");
    sge.addr = (uint64_t)(uintptr_t)(a.buf + 500); sge.length = 3000;
    wr.wr_id = 2; wr.opcode = SRNIC_WR_SEND_WITH_IMM; wr.imm_data = 0x1234;
    CHECK(srnic_post_send(a.qp, &wr) == 0, "post send");
    CHECK(srnic_get_cq_event(b.cq, 10000) == 1, "no completion event");
    CHECK(wait1(a.cq, &wc) == 0 && wc.status == 0 && wc.wr_id == 2, "send wc");
    CHECK(wait1(b.cq, &wc) == 0 && wc.status == 0 && wc.wr_id == 9 && wc.byte_len == 3000 &&
          wc.opcode == SRNIC_WC_RECV && (wc.wc_flags & 1) && wc.imm_data == 0x1234, "recv wc");
    CHECK(memcmp(a.buf + 500, b.buf + 0x40000, 3000) == 0, "send data");

    /* READ 5000 bytes b -> a */
    sge.addr = (uint64_t)(uintptr_t)(a.buf + 0x80000); sge.length = 5000;
    wr.wr_id = 3; wr.opcode = SRNIC_WR_RDMA_READ;
    wr.remote_addr = (uint64_t)(uintptr_t)(b.buf + 0x80000);
    CHECK(srnic_post_send(a.qp, &wr) == 0, "post read");
    CHECK(wait1(a.cq, &wc) == 0 && wc.status == 0 && wc.wr_id == 3, "read wc");
    CHECK(memcmp(a.buf + 0x80000, b.buf + 0x80000, 5000) == 0, "read data");

    /* FETCH_ADD 5 on b's word (7) */
    sge.addr = (uint64_t)(uintptr_t)(a.buf + 0xf0000); sge.length = 8;
    wr.wr_id = 4; wr.opcode = SRNIC_WR_ATOMIC_FETCH_AND_ADD; wr.compare_add = 5;
    wr.remote_addr = (uint64_t)(uintptr_t)(b.buf + 0xf0000);
    CHECK(srnic_post_send(a.qp, &wr) == 0, "post faa");
    CHECK(wait1(a.cq, &wc) == 0 && wc.status == 0 && wc.wr_id == 4, "faa wc");
    uint64_t old, now;
    memcpy(&old, a.buf + 0xf0000, 8);
    memcpy(&now, b.buf + 0xf0000, 8);
    CHECK(old == 7 && now == 12, "faa %llu %llu", (unsigned long long)old, (unsigned long long)now);

    /* a bad lkey completes with an error, it does not crash anything */
    sge.lkey ^= 0x77770000; wr.wr_id = 5; wr.opcode = SRNIC_WR_RDMA_WRITE;
    CHECK(srnic_post_send(a.qp, &wr) == 0, "post bad");
    CHECK(wait1(a.cq, &wc) == 0 && wc.status != 0 && wc.wr_id == 5, "bad lkey wc %u", wc.status);

    /* the process's own memory registers too (its pages move onto shared
     * memory at the same address; the bytes stay) */
    char *own = malloc(10000);
    memset(own, 0x3c, 10000);
    struct srnic_mr *omr = srnic_reg_mr(a.pd, own + 1, 9000, SRNIC_ACCESS_LOCAL_WRITE);
    CHECK(omr != NULL && own[5000] == 0x3c, "reg_mr on malloc memory");
    CHECK(srnic_dereg_mr(omr) == 0, "dereg malloc mr");
    free(own);

    CHECK(srnic_destroy_qp(a.qp) == 0 && srnic_destroy_qp(b.qp) == 0, "destroy qp");
    CHECK(srnic_dereg_mr(a.mr) == 0 && srnic_destroy_cq(a.cq) == 0, "destroy");
    srnic_close_device(a.ctx);
    srnic_close_device(b.ctx);
    printf("C OK\n");
    return 0;
}
