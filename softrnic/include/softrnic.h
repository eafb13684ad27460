/* softrnic client C API: verbs with ibverbs-like names over the softrnic
 * daemon (rnicd). Link with -lsoftrnic. Functions returning int return 0
 * or an errno value; constructors return NULL on failure. Posting and
 * polling touch only shared memory (no syscall). */
#ifndef SOFTRNIC_H
#define SOFTRNIC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct srnic_context;
struct srnic_pd;
struct srnic_mr;
struct srnic_cq;
struct srnic_qp;
struct srnic_ah;
struct srnic_srq;

enum srnic_access_flags {
    SRNIC_ACCESS_LOCAL_WRITE = 1,
    SRNIC_ACCESS_REMOTE_WRITE = 2,
    SRNIC_ACCESS_REMOTE_READ = 4,
    SRNIC_ACCESS_REMOTE_ATOMIC = 8,
};

enum srnic_wr_opcode {
    SRNIC_WR_SEND = 0,
    SRNIC_WR_SEND_WITH_IMM = 1,
    SRNIC_WR_RDMA_WRITE = 2,
    SRNIC_WR_RDMA_WRITE_WITH_IMM = 3,
    SRNIC_WR_RDMA_READ = 4,
    SRNIC_WR_ATOMIC_CMP_AND_SWP = 5,
    SRNIC_WR_ATOMIC_FETCH_AND_ADD = 6,
    SRNIC_WR_SEND_WITH_INV = 7,
};

enum srnic_send_flags {
    SRNIC_SEND_SIGNALED = 1,
    SRNIC_SEND_FENCE = 2,
    SRNIC_SEND_SOLICITED = 4,
};

enum srnic_wc_status {
    SRNIC_WC_SUCCESS = 0,
    SRNIC_WC_LOC_LEN_ERR,
    SRNIC_WC_LOC_QP_OP_ERR,
    SRNIC_WC_LOC_PROT_ERR,
    SRNIC_WC_WR_FLUSH_ERR,
    SRNIC_WC_LOC_ACCESS_ERR,
    SRNIC_WC_REM_INV_REQ_ERR,
    SRNIC_WC_REM_ACCESS_ERR,
    SRNIC_WC_REM_OP_ERR,
    SRNIC_WC_RETRY_EXC_ERR,
    SRNIC_WC_RNR_RETRY_EXC_ERR,
    SRNIC_WC_BAD_RESP_ERR,
    SRNIC_WC_GENERAL_ERR,
};

enum srnic_wc_opcode {
    SRNIC_WC_SEND = 0,
    SRNIC_WC_RDMA_WRITE,
    SRNIC_WC_RDMA_READ,
    SRNIC_WC_COMP_SWAP,
    SRNIC_WC_FETCH_ADD,
    SRNIC_WC_RECV,
    SRNIC_WC_RECV_RDMA_WITH_IMM,
};

struct srnic_device_attr {
    uint8_t gid[16];
    uint8_t mac[6];
    uint32_t mtu;
    uint32_t max_qp_wr;
    uint32_t max_cqe;
    uint32_t max_sge;
};

/* enum ibv_port_state numbering */
enum srnic_port_state {
    SRNIC_PORT_DOWN = 1,   /* the link is down */
    SRNIC_PORT_ACTIVE = 4, /* the link is up */
};

struct srnic_port_attr {
    uint32_t state;          /* enum srnic_port_state */
    uint32_t active_mtu;     /* IB MTU in bytes, 256..4096 */
    uint32_t max_mtu;
    uint64_t link_speed_bps;
};

struct srnic_sge {
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
};

struct srnic_send_wr {
    uint64_t wr_id;
    uint32_t opcode;     /* enum srnic_wr_opcode */
    uint32_t send_flags; /* enum srnic_send_flags */
    const struct srnic_sge *sg_list;
    uint32_t num_sge;    /* at most 8 */
    uint32_t imm_data;   /* or the rkey to invalidate */
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t _pad;
    uint64_t compare_add;
    uint64_t swap;
};

struct srnic_recv_wr {
    uint64_t wr_id;
    const struct srnic_sge *sg_list;
    uint32_t num_sge;
};

struct srnic_wc {
    uint64_t wr_id;
    uint32_t status;  /* enum srnic_wc_status */
    uint32_t opcode;  /* enum srnic_wc_opcode */
    uint32_t qp_num;
    uint32_t byte_len;
    uint32_t imm_data;
    uint32_t wc_flags; /* enum srnic_wc_flags */
};

enum srnic_wc_flags {
    SRNIC_WC_WITH_IMM = 1,
    SRNIC_WC_GRH = 2, /* UD receive: the first 40 bytes hold the GRH */
};

/* srnic_wc plus the source QP of UD receives (srnic_poll_cq_ex). */
struct srnic_wc_ex {
    uint64_t wr_id;
    uint32_t status;
    uint32_t opcode;
    uint32_t qp_num;
    uint32_t byte_len;
    uint32_t imm_data;
    uint32_t wc_flags;
    uint32_t src_qp;
    uint32_t _pad;
};

enum srnic_qp_type {
    SRNIC_QPT_RC = 0,
    SRNIC_QPT_UC = 1,
    SRNIC_QPT_UD = 2,
};

struct srnic_ah_attr {
    uint8_t dgid[16];
    uint8_t dmac[6];
    uint8_t traffic_class;
    uint8_t hop_limit;
    uint32_t flow_label; /* 20 bits */
};

struct srnic_qp_init_attr {
    struct srnic_cq *send_cq;
    struct srnic_cq *recv_cq;
    uint32_t max_send_wr;
    uint32_t max_recv_wr;
    int sq_sig_all;
};

struct srnic_qp_init_attr_ex {
    struct srnic_cq *send_cq;
    struct srnic_cq *recv_cq;
    struct srnic_srq *srq; /* NULL: the QP's own receive queue */
    uint32_t max_send_wr;
    uint32_t max_recv_wr;  /* with an SRQ: unused */
    int sq_sig_all;
    uint32_t qp_type;      /* enum srnic_qp_type */
};

/* path: the device's control socket, e.g. /run/softrnic/srnic0.sock */
struct srnic_context *srnic_open_device(const char *path);
int srnic_close_device(struct srnic_context *ctx);
int srnic_query_device(const struct srnic_context *ctx, struct srnic_device_attr *attr);
/* ibv_query_port: 0 and *attr filled; EINVAL for NULL arguments or a port
 * other than 1 (the device has one port), EIO if the daemon cannot be asked. */
int srnic_query_port(const struct srnic_context *ctx, uint8_t port_num,
                     struct srnic_port_attr *attr);

struct srnic_pd *srnic_alloc_pd(struct srnic_context *ctx);
int srnic_dealloc_pd(struct srnic_pd *pd);

/* Shared memory the daemon accesses in place; freed with the context. */
void *srnic_alloc_buf(struct srnic_pd *pd, size_t len);
/* [addr, addr+len): in an srnic_alloc_buf buffer, or any private memory of
 * the process (malloc, posix_memalign, mmap), whose pages then move onto
 * shared memory at the same address (softrnic/README.md, "Memory
 * registration"). NULL for memory that cannot be shared (shared mappings
 * not the process's own, hugetlb, stacks, holes, read-only pages asked for
 * write access); nothing changes then. */
struct srnic_mr *srnic_reg_mr(struct srnic_pd *pd, void *addr, size_t len, int access);
uint32_t srnic_mr_lkey(const struct srnic_mr *mr);
uint32_t srnic_mr_rkey(const struct srnic_mr *mr);
int srnic_dereg_mr(struct srnic_mr *mr);

struct srnic_cq *srnic_create_cq(struct srnic_context *ctx, int cqe);
int srnic_destroy_cq(struct srnic_cq *cq);
int srnic_poll_cq(struct srnic_cq *cq, int num_entries, struct srnic_wc *wc);
int srnic_poll_cq_ex(struct srnic_cq *cq, int num_entries, struct srnic_wc_ex *wc);
/* Completion events (ibv_req_notify_cq, a completion channel): ask for the
 * next completion (solicited_only: the next solicited or unsuccessful one),
 * poll once more, then wait. One request, one event. 0 or an errno. */
int srnic_req_notify_cq(struct srnic_cq *cq, int solicited_only);
/* Waits up to timeout_ms (< 0: for ever) and consumes the event:
 * 1 an event, 0 none in time, -EINVAL without a request. */
int srnic_get_cq_event(struct srnic_cq *cq, int timeout_ms);
/* Readable on an event (poll/epoll); -1 before the first request. */
int srnic_cq_event_fd(const struct srnic_cq *cq);

/* RC QPs. */
struct srnic_qp *srnic_create_qp(struct srnic_pd *pd, const struct srnic_qp_init_attr *attr);
uint32_t srnic_qp_num(const struct srnic_qp *qp);
/* INIT -> RTR -> RTS towards dest_qpn at (dgid, dmac). */
int srnic_connect_qp(struct srnic_qp *qp, const uint8_t dgid[16], const uint8_t dmac[6],
                     uint32_t dest_qpn, uint32_t sq_psn, uint32_t rq_psn);
int srnic_destroy_qp(struct srnic_qp *qp);
/* Any QP type, optionally on an SRQ of the same PD. */
struct srnic_qp *srnic_create_qp_ex(struct srnic_pd *pd, const struct srnic_qp_init_attr_ex *attr);
/* UD: INIT (P_Key index 0, port 1, qkey) -> RTR -> RTS. */
int srnic_ready_ud_qp(struct srnic_qp *qp, uint32_t qkey, uint32_t sq_psn);

/* Address handles for UD sends; only this process's QPs on `pd` may use one. */
struct srnic_ah *srnic_create_ah(struct srnic_pd *pd, const struct srnic_ah_attr *attr);
int srnic_destroy_ah(struct srnic_ah *ah);

/* Shared receive queues. */
struct srnic_srq *srnic_create_srq(struct srnic_pd *pd, uint32_t max_wr);
int srnic_post_srq_recv(struct srnic_srq *srq, const struct srnic_recv_wr *wr);
int srnic_destroy_srq(struct srnic_srq *srq); /* EBUSY (and still usable) while QPs use it */
/* The SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT): once fewer than
 * srq_limit receives are left, SRNIC_EVENT_SRQ_LIMIT_REACHED comes and the
 * limit disarms; 0 disarms. EINVAL: null SRQ or a limit above its size. */
int srnic_modify_srq(struct srnic_srq *srq, uint32_t srq_limit);
/* ibv_query_srq: its size and armed limit (0: not armed, or fired);
 * either pointer may be NULL. */
int srnic_query_srq(struct srnic_srq *srq, uint32_t *max_wr, uint32_t *srq_limit);
uint32_t srnic_srq_num(const struct srnic_srq *srq); /* srnic_async_event.srq_num */
uint32_t srnic_cq_num(const struct srnic_cq *cq);    /* srnic_async_event.cq_num */
/* Asynchronous events (ibv_get_async_event), numbered as rdma-core's
 * enum ibv_event_type. Each goes only to the process owning the object;
 * the port events (unaffiliated) go to every open context. */
enum srnic_event_type {
    SRNIC_EVENT_CQ_ERR = 0,              /* the CQ overran */
    SRNIC_EVENT_QP_FATAL = 1,            /* the QP's CQ overran; QP in ERR */
    SRNIC_EVENT_QP_REQ_ERR = 2,          /* NAKed an invalid request; QP in ERR */
    SRNIC_EVENT_QP_ACCESS_ERR = 3,       /* NAKed a remote access error; QP in ERR */
    SRNIC_EVENT_COMM_EST = 4,            /* first packet received in RTR */
    SRNIC_EVENT_SQ_DRAINED = 5,          /* in SQD, nothing in progress */
    SRNIC_EVENT_PORT_ACTIVE = 9,         /* the port's link came up */
    SRNIC_EVENT_PORT_ERR = 10,           /* the port's link went down */
    SRNIC_EVENT_SRQ_LIMIT_REACHED = 15,
    SRNIC_EVENT_QP_LAST_WQE_REACHED = 16, /* a QP on an SRQ went to ERR */
};
struct srnic_async_event {
    uint32_t event_type; /* enum srnic_event_type */
    uint32_t qp_num;     /* QP events, else 0 */
    uint32_t cq_num;     /* SRNIC_EVENT_CQ_ERR: srnic_cq_num(cq), else 0 */
    uint32_t srq_num;    /* SRNIC_EVENT_SRQ_LIMIT_REACHED: srnic_srq_num(srq), else 0 */
    uint32_t port_num;   /* SRNIC_EVENT_PORT_*: the port (1), else 0 */
};
/* Waits up to timeout_ms (< 0: for ever) for the next event (no ack
 * needed): 1 an event in *ev, 0 none in time, -EINVAL null arguments,
 * -EIO the daemon could not be asked. */
int srnic_get_async_event(struct srnic_context *ctx, struct srnic_async_event *ev, int timeout_ms);
/* Readable while an event waits (poll/epoll); -1 on error. */
int srnic_async_event_fd(struct srnic_context *ctx);

int srnic_post_send(struct srnic_qp *qp, const struct srnic_send_wr *wr);
int srnic_post_recv(struct srnic_qp *qp, const struct srnic_recv_wr *wr);
/* UD SEND / SEND_WITH_IMM to remote_qpn at ah; UD receives get a 40-byte
 * GRH first, so post receive buffers 40 bytes longer than the message. */
int srnic_post_send_ud(struct srnic_qp *qp, const struct srnic_send_wr *wr,
                       const struct srnic_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey);

#ifdef __cplusplus
}
#endif
#endif
