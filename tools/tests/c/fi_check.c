/* libfabric (1.17, libfabric-dev's headers) moving data that is checked,
 * between two processes over the verbs provider's MSG endpoint
 * (FI_EP_MSG: an RC QP connected by the RDMA CM):
 *
 *   fi_check server PORT ROUNDS [--corrupt]
 *   fi_check client ADDR PORT ROUNDS [--corrupt]
 *
 * The server listens on a passive endpoint at PORT (fi_listen) and
 * accepts one connection request from its EQ (FI_CONNREQ, fi_accept,
 * FI_CONNECTED); the client connects to ADDR:PORT (fi_connect), again
 * while the server is not yet listening (a rejected request), for a
 * bounded time. Then, ROUNDS times, for each of 64 B, 4 KiB, 64 KiB and
 * 1 MiB: the client sends a message, each byte a function of its size,
 * round and offset; the server checks every byte and answers with the
 * same size, every byte inverted, which the client checks. Both print
 * "fi_check ok" and exit 0.
 *
 * A wrong byte: the first one is named and the program exits 1.
 * `--corrupt` makes the side send one wrong byte in its first 4 KiB
 * message, for a test that the receiver's check fails.
 *
 * While it waits for a completion, the program also reads its EQ: an
 * FI_SHUTDOWN event (the peer's disconnect, as the RDMA CM reports a DREQ:
 * RDMA_CM_EVENT_DISCONNECTED), an EQ error or a completion with an error
 * ends it with "fi_check: peer failure: ..." and exit 2. Any other
 * failure of a libfabric call exits 3. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG (1 << 20)
#define EXIT_PEER 2
#define EXIT_CALL 3
/* How often the client asks again while the server is not listening,
 * and how long it waits in between (100 * 100 ms: 10 s). */
#define CONNECT_TRIES 100
#define CONNECT_PAUSE_US 100000
/* Empty CQ reads between two reads of the EQ. */
#define EQ_EVERY 256

static const size_t sizes[] = { 64, 4096, 65536, BIG };

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_ep *ep;
static struct fid_cq *txcq, *rxcq;
static struct fid_mr *mr;
static uint8_t *sbuf, *rbuf; /* one registered allocation, halves */
static void *desc;

static void call_failed(const char *what, long rc) {
	fprintf(stderr, "fi_check: %s: %s (%ld)\n", what, fi_strerror((int)-rc), rc);
	exit(EXIT_CALL);
}

#define CHECK(call)                                  \
	do {                                         \
		long rc_ = (long)(call);             \
		if (rc_)                             \
			call_failed(#call, rc_);     \
	} while (0)

static void peer_failure(const char *what, const char *detail) {
	fprintf(stderr, "fi_check: peer failure: %s%s%s\n", what, detail ? ": " : "",
		detail ? detail : "");
	exit(EXIT_PEER);
}

/* The EQ's pending error: its errno and the provider's words for it. */
static const char *eq_error(int *err) {
	static char text[256];
	struct fi_eq_err_entry e = { 0 };
	if (fi_eq_readerr(eq, &e, 0) < 0) {
		*err = 0;
		return "fi_eq_readerr failed";
	}
	*err = e.err;
	snprintf(text, sizeof text, "%s (%s)", fi_strerror(e.err),
		 fi_eq_strerror(eq, e.prov_errno, e.err_data, NULL, 0));
	return text;
}

/* Reads the EQ without waiting: the peer's disconnect or an EQ error
 * end the program (exit 2). */
static void poll_eq(void) {
	uint32_t event;
	struct fi_eq_cm_entry entry;
	ssize_t n = fi_eq_read(eq, &event, &entry, sizeof entry, 0);
	if (n == -FI_EAGAIN)
		return;
	if (n == -FI_EAVAIL) {
		int err;
		peer_failure("EQ error", eq_error(&err));
	}
	if (n < 0)
		call_failed("fi_eq_read", n);
	if (event == FI_SHUTDOWN)
		peer_failure("FI_SHUTDOWN (the peer disconnected)", NULL);
	fprintf(stderr, "fi_check: unexpected EQ event %u\n", event);
	exit(EXIT_CALL);
}

/* Waits for one completion on `cq`, reading the EQ meanwhile: the
 * length it moved. */
static size_t wait_cq(struct fid_cq *cq, const char *what) {
	struct fi_cq_msg_entry c;
	for (unsigned long empty = 0;; empty++) {
		ssize_t n = fi_cq_read(cq, &c, 1);
		if (n == 1)
			return c.len;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry e = { 0 };
			char text[256];
			fi_cq_readerr(cq, &e, 0);
			snprintf(text, sizeof text, "%s of %s: %s (%s)", "completion error", what,
				 fi_strerror(e.err),
				 fi_cq_strerror(cq, e.prov_errno, e.err_data, NULL, 0));
			peer_failure("CQ error", text);
		}
		if (n != -FI_EAGAIN)
			call_failed("fi_cq_read", n);
		if (empty % EQ_EVERY == 0)
			poll_eq();
	}
}

/* Waits for the EQ's next event, which must be `want`; an error event
 * is answered with its errno (negative), or ends the program. */
static int wait_eq(uint32_t want, struct fi_eq_cm_entry *entry, int may_fail) {
	uint32_t event;
	ssize_t n = fi_eq_sread(eq, &event, entry, sizeof *entry, -1, 0);
	if (n == -FI_EAVAIL) {
		int err;
		const char *text = eq_error(&err);
		if (may_fail && err)
			return -err;
		fprintf(stderr, "fi_check: waiting for event %u: %s\n", want, text);
		exit(EXIT_CALL);
	}
	if (n < 0)
		call_failed("fi_eq_sread", n);
	if (event != want) {
		fprintf(stderr, "fi_check: EQ event %u, not %u\n", event, want);
		exit(EXIT_CALL);
	}
	return 0;
}

static uint8_t byte_at(size_t size, long round, size_t i) {
	return (uint8_t)(i * 131 + size * 7 + (i >> 8) + (size_t)round * 29);
}

static void fill(uint8_t *b, size_t size, long round, uint8_t flip) {
	for (size_t i = 0; i < size; i++)
		b[i] = byte_at(size, round, i) ^ flip;
}

/* Checks the `len` bytes received against the message of `size`. */
static void check(const uint8_t *b, size_t len, size_t size, long round, uint8_t flip,
		  const char *what) {
	if (len != size) {
		fprintf(stderr, "fi_check: %s of %zu bytes, round %ld: %zu bytes came\n", what,
			size, round, len);
		exit(1);
	}
	for (size_t i = 0; i < size; i++) {
		uint8_t want = byte_at(size, round, i) ^ flip;
		if (b[i] != want) {
			fprintf(stderr,
				"fi_check: %s of %zu bytes, round %ld: byte %zu is %#x, not %#x\n",
				what, size, round, i, b[i], want);
			exit(1);
		}
	}
}

static struct fi_context rx_ctx, tx_ctx;

static void post_recv(void) {
	ssize_t rc;
	while ((rc = fi_recv(ep, rbuf, BIG, desc, 0, &rx_ctx)) == -FI_EAGAIN)
		poll_eq();
	if (rc)
		call_failed("fi_recv", rc);
}

static void send_msg(size_t size) {
	ssize_t rc;
	while ((rc = fi_send(ep, sbuf, size, desc, 0, &tx_ctx)) == -FI_EAGAIN)
		poll_eq();
	if (rc)
		call_failed("fi_send", rc);
	wait_cq(txcq, "a send");
}

/* The endpoint of `info`, its CQs and EQ bound, enabled, with a receive
 * posted and the buffers registered. */
static void open_ep(struct fi_info *info) {
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_MSG,
				      .wait_obj = FI_WAIT_NONE,
				      .size = 16 };
	CHECK(fi_endpoint(domain, info, &ep, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &txcq, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &rxcq, NULL));
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	CHECK(fi_ep_bind(ep, &txcq->fid, FI_TRANSMIT));
	CHECK(fi_ep_bind(ep, &rxcq->fid, FI_RECV));
	CHECK(fi_enable(ep));
	post_recv();
}

static void close_ep(void) {
	CHECK(fi_close(&ep->fid));
	CHECK(fi_close(&txcq->fid));
	CHECK(fi_close(&rxcq->fid));
}

/* The fabric, EQ and domain of `info`, and the registered buffers. */
static void open_domain(struct fi_info *fab, struct fi_info *info) {
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_UNSPEC };
	if (!fabric) {
		CHECK(fi_fabric(fab->fabric_attr, &fabric, NULL));
		CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	}
	if (!info)
		return;
	CHECK(fi_domain(fabric, info, &domain, NULL));
	sbuf = aligned_alloc(4096, 2 * BIG);
	if (!sbuf)
		call_failed("aligned_alloc", -FI_ENOMEM);
	rbuf = sbuf + BIG;
	CHECK(fi_mr_reg(domain, sbuf, 2 * BIG, FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL));
	desc = fi_mr_desc(mr);
}

static struct fi_info *hints(void) {
	struct fi_info *h = fi_allocinfo();
	if (!h)
		call_failed("fi_allocinfo", -FI_ENOMEM);
	h->ep_attr->type = FI_EP_MSG;
	h->caps = FI_MSG;
	h->mode = FI_CONTEXT;
	h->addr_format = FI_SOCKADDR_IN;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->fabric_attr->prov_name = strdup("verbs");
	return h;
}

static void serve(const char *port) {
	struct fi_info *info;
	struct fid_pep *pep;
	struct fi_eq_cm_entry entry;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, port, FI_SOURCE, hints(), &info));
	open_domain(info, NULL);
	CHECK(fi_passive_ep(fabric, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	CHECK(fi_listen(pep));
	wait_eq(FI_CONNREQ, &entry, 0);
	open_domain(info, entry.info);
	open_ep(entry.info);
	CHECK(fi_accept(ep, NULL, 0));
	wait_eq(FI_CONNECTED, &entry, 0);
}

static void connect_to(const char *addr, const char *port) {
	struct fi_info *info;
	struct fi_eq_cm_entry entry;
	CHECK(fi_getinfo(FI_VERSION(1, 17), addr, port, 0, hints(), &info));
	open_domain(info, info);
	for (int tries = 1;; tries++) {
		open_ep(info);
		CHECK(fi_connect(ep, info->dest_addr, NULL, 0));
		int rc = wait_eq(FI_CONNECTED, &entry, tries < CONNECT_TRIES);
		if (rc == 0)
			return;
		/* refused (no listener yet): a new endpoint asks again */
		close_ep();
		usleep(CONNECT_PAUSE_US);
	}
}

int main(int argc, char **argv) {
	int server = argc >= 2 && strcmp(argv[1], "server") == 0;
	int args = server ? 4 : 5;
	int corrupt = argc == args + 1 && strcmp(argv[args], "--corrupt") == 0;
	if (argc < 2 || (argc != args && !corrupt)) {
		fprintf(stderr, "usage: fi_check server PORT ROUNDS [--corrupt]\n"
				"       fi_check client ADDR PORT ROUNDS [--corrupt]\n");
		return EXIT_CALL;
	}
	long rounds = atol(argv[args - 1]);
	if (server)
		serve(argv[2]);
	else
		connect_to(argv[2], argv[3]);
	for (long r = 0; r < rounds; r++)
		for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
			size_t size = sizes[k];
			int wrong = corrupt && r == 0 && size == 4096;
			if (server) {
				size_t len = wait_cq(rxcq, "a receive");
				check(rbuf, len, size, r, 0, "message");
				post_recv();
				fill(sbuf, size, r, 0xff);
				sbuf[size / 2] ^= wrong ? 1 : 0;
				send_msg(size);
			} else {
				fill(sbuf, size, r, 0);
				sbuf[size / 2] ^= wrong ? 1 : 0;
				send_msg(size);
				size_t len = wait_cq(rxcq, "a receive");
				check(rbuf, len, size, r, 0xff, "reply");
				post_recv();
			}
		}
	printf("fi_check ok: %ld rounds of 64 B to 1 MiB\n", rounds);
	return 0;
}
