/* UCP (UCX 1.13's libucp.so.0) moving data that is checked, between two
 * processes: `ucp_check server DIR` and `ucp_check client DIR`. They swap
 * worker addresses (and the server's rkey) as files in DIR, then:
 *  - the client sends tagged messages of 8 B, 4 KiB, 64 KiB (eager) and
 *    1 MiB (rendezvous: the receiver READs), each byte a function of its
 *    size and offset; the server checks every byte and answers each with
 *    the same size, every byte inverted, which the client checks;
 *  - the client PUTs 1 MiB into the server's mapped buffer, flushes, and
 *    tells the server with a tagged message; the server checks the buffer.
 * Prints "ucp_check ok" and exits 0, or names the first wrong byte and
 * exits 1.
 *
 * `ucp_check server|client DIR ROUNDS` repeats the tagged exchange ROUNDS
 * times, its endpoints created with peer error handling
 * (UCP_ERR_HANDLING_MODE_PEER): when UCX finds the peer gone (its
 * keepalive, a transport error), the error handler, or a request UCX
 * completes with an error, prints "ucp_check: peer failure" with UCX's
 * status and exits 2. A long run
 * for a test to kill the peer in.
 *
 * ucx-utils ships no UCX headers (libucx-dev): the few declarations used
 * are written here from UCX 1.13's ucp.h, only the leading fields of the
 * parameter structs (the rest zero, past what their field masks name). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int ucs_status_t;
typedef void *ucs_status_ptr_t;
typedef void *ucp_context_h, *ucp_worker_h, *ucp_ep_h, *ucp_mem_h, *ucp_rkey_h;
typedef struct ucp_address ucp_address_t;
typedef uint64_t ucp_tag_t, ucp_datatype_t;
typedef struct { ucp_tag_t sender_tag; size_t length; } ucp_tag_recv_info_t;
typedef void (*ucp_send_callback_t)(void *, ucs_status_t);
typedef void (*ucp_tag_recv_callback_t)(void *, ucs_status_t, ucp_tag_recv_info_t *);

struct ucp_params { uint64_t field_mask, features; char rest[256]; };
struct ucp_worker_params { uint64_t field_mask; int thread_mode; char rest[256]; };
typedef void (*ucp_err_handler_cb_t)(void *, ucp_ep_h, ucs_status_t);
struct ucp_ep_params {
	uint64_t field_mask;
	const ucp_address_t *address;
	int err_mode; /* ucp_err_handling_mode_t */
	ucp_err_handler_cb_t err_cb; /* ucp_err_handler_t: cb, arg */
	void *err_arg;
	char rest[256];
};
struct ucp_mem_map_params { uint64_t field_mask; void *address; size_t length; char rest[256]; };

ucs_status_t ucp_init_version(unsigned, unsigned, const struct ucp_params *, const void *,
			      ucp_context_h *);
ucs_status_t ucp_worker_create(ucp_context_h, const struct ucp_worker_params *, ucp_worker_h *);
ucs_status_t ucp_worker_get_address(ucp_worker_h, ucp_address_t **, size_t *);
ucs_status_t ucp_ep_create(ucp_worker_h, const struct ucp_ep_params *, ucp_ep_h *);
unsigned ucp_worker_progress(ucp_worker_h);
ucs_status_t ucp_worker_flush(ucp_worker_h);
ucs_status_t ucp_request_check_status(void *);
void ucp_request_free(void *);
ucs_status_ptr_t ucp_tag_send_nb(ucp_ep_h, const void *, size_t, ucp_datatype_t, ucp_tag_t,
				 ucp_send_callback_t);
ucs_status_ptr_t ucp_tag_recv_nb(ucp_worker_h, void *, size_t, ucp_datatype_t, ucp_tag_t,
				 ucp_tag_t, ucp_tag_recv_callback_t);
ucs_status_ptr_t ucp_put_nb(ucp_ep_h, const void *, size_t, uint64_t, ucp_rkey_h,
			    ucp_send_callback_t);
ucs_status_t ucp_mem_map(ucp_context_h, const struct ucp_mem_map_params *, ucp_mem_h *);
ucs_status_t ucp_rkey_pack(ucp_context_h, ucp_mem_h, void **, size_t *);
ucs_status_t ucp_ep_rkey_unpack(ucp_ep_h, const void *, ucp_rkey_h *);

#define UCS_INPROGRESS 1
#define UCS_ERR_LAST (-100)
#define CONTIG ((ucp_datatype_t)1 << 3) /* ucp_dt_make_contig(1) */
#define TAG_DATA 0x100
#define TAG_REPLY 0x200
#define TAG_PUT_DONE 0x300
/* ucp_ep_params field_mask: REMOTE_ADDRESS, ERR_HANDLING_MODE, ERR_HANDLER */
#define EP_ADDRESS 1
#define EP_ERR_MODE 2
#define EP_ERR_HANDLER 4
#define ERR_HANDLING_MODE_PEER 1
#define BIG (1 << 20)

static ucp_worker_h worker;
static const char *dir;

static void die(const char *what, long v) {
	fprintf(stderr, "ucp_check: %s (%ld)\n", what, v);
	exit(1);
}

static void on_send(void *r, ucs_status_t s) { (void)r; (void)s; }

/* Whether the endpoints have peer error handling (the ROUNDS mode). */
static int peer_mode;

static void peer_failure(ucs_status_t s, const char *what) {
	fprintf(stderr, "ucp_check: peer failure (UCX status %d) in %s\n", s, what);
	exit(2);
}

static void on_peer_failure(void *arg, ucp_ep_h ep, ucs_status_t s) {
	(void)arg;
	(void)ep;
	peer_failure(s, "the endpoint's error handler");
}
static void on_recv(void *r, ucs_status_t s, ucp_tag_recv_info_t *i) { (void)r; (void)s; (void)i; }

/* Progresses until request `r` (from a *_nb call) completes. */
static void wait_req(ucs_status_ptr_t r, const char *what) {
	if (r == NULL)
		return;
	if ((uintptr_t)r >= (uintptr_t)(intptr_t)UCS_ERR_LAST) {
		if (peer_mode)
			peer_failure((ucs_status_t)(intptr_t)r, what);
		die(what, (long)(intptr_t)r);
	}
	ucs_status_t s;
	while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS)
		ucp_worker_progress(worker);
	ucp_request_free(r);
	/* with peer error handling, UCX fails the requests of a failed peer */
	if (s != 0 && peer_mode)
		peer_failure(s, what);
	if (s != 0)
		die(what, s);
}

static void put_file(const char *name, const void *p, size_t n) {
	char tmp[4096], path[4096];
	snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name);
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(tmp, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f) || rename(tmp, path))
		die("write file", 0);
}

/* The contents of DIR/name once it is there (written whole by rename). */
static void *get_file(const char *name, size_t *n) {
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f;
	while (!(f = fopen(path, "rb")))
		usleep(10000);
	char *buf = malloc(1 << 16);
	*n = fread(buf, 1, 1 << 16, f);
	fclose(f);
	return buf;
}

static uint8_t byte_at(size_t size, size_t i) { return (uint8_t)(i * 131 + size * 7 + (i >> 8)); }

static void fill(uint8_t *b, size_t size, uint8_t flip) {
	for (size_t i = 0; i < size; i++)
		b[i] = byte_at(size, i) ^ flip;
}

static void check(const uint8_t *b, size_t size, uint8_t flip, const char *what) {
	for (size_t i = 0; i < size; i++)
		if (b[i] != (uint8_t)(byte_at(size, i) ^ flip)) {
			fprintf(stderr, "ucp_check: %s of %zu bytes: byte %zu is %#x, not %#x\n", what,
				size, i, b[i], byte_at(size, i) ^ flip);
			exit(1);
		}
}

static void recv_into(void *b, size_t n, ucp_tag_t tag, const char *what) {
	wait_req(ucp_tag_recv_nb(worker, b, n, CONTIG, tag, ~(ucp_tag_t)0, on_recv), what);
}

int main(int argc, char **argv) {
	if (argc != 3 && argc != 4)
		die("usage: ucp_check server|client DIR [ROUNDS]", 0);
	int server = strcmp(argv[1], "server") == 0;
	dir = argv[2];
	long rounds = argc == 4 ? atol(argv[3]) : 1;
	struct ucp_params p = { .field_mask = 1, .features = 1 | 2 }; /* TAG | RMA */
	ucp_context_h ctx;
	if (ucp_init_version(1, 13, &p, NULL, &ctx))
		die("ucp_init", 0);
	struct ucp_worker_params wp = { .field_mask = 1, .thread_mode = 0 };
	if (ucp_worker_create(ctx, &wp, &worker))
		die("ucp_worker_create", 0);
	ucp_address_t *addr;
	size_t alen, n;
	if (ucp_worker_get_address(worker, &addr, &alen))
		die("ucp_worker_get_address", 0);
	uint8_t *mine = malloc(BIG), *theirs = malloc(BIG);
	memset(theirs, 0, BIG);
	put_file(server ? "server.addr" : "client.addr", addr, alen);
	struct ucp_ep_params ep_p = { .field_mask = EP_ADDRESS };
	peer_mode = argc == 4;
	if (peer_mode) {
		ep_p.field_mask |= EP_ERR_MODE | EP_ERR_HANDLER;
		ep_p.err_mode = ERR_HANDLING_MODE_PEER;
		ep_p.err_cb = on_peer_failure;
	}
	ep_p.address = get_file(server ? "client.addr" : "server.addr", &n);
	ucp_ep_h ep;
	if (ucp_ep_create(worker, &ep_p, &ep))
		die("ucp_ep_create", 0);
	static const size_t sizes[] = { 8, 4096, 65536, BIG };
	if (server) {
		/* the buffer the client PUTs into, and its rkey for the client */
		struct ucp_mem_map_params mp = { .field_mask = 3, .address = theirs, .length = BIG };
		ucp_mem_h memh;
		void *rk;
		size_t rklen;
		if (ucp_mem_map(ctx, &mp, &memh) || ucp_rkey_pack(ctx, memh, &rk, &rklen))
			die("ucp_mem_map", 0);
		uint64_t at = (uintptr_t)theirs;
		put_file("server.rkey", rk, rklen);
		put_file("server.va", &at, sizeof at);
		for (long k = 0; k < 4 * rounds; k++) {
			memset(mine, 0, BIG);
			size_t size = sizes[k % 4];
			recv_into(mine, size, TAG_DATA + k % 4, "recv");
			check(mine, size, 0, "tagged message");
			fill(mine, size, 0xff);
			wait_req(ucp_tag_send_nb(ep, mine, size, CONTIG, TAG_REPLY + k % 4, on_send),
				 "reply");
		}
		recv_into(mine, 8, TAG_PUT_DONE, "put done");
		check(theirs, BIG, 0x5a, "PUT buffer");
		/* the last word: the client may leave once it has it */
		wait_req(ucp_tag_send_nb(ep, mine, 8, CONTIG, TAG_PUT_DONE, on_send), "bye");
	} else {
		for (long k = 0; k < 4 * rounds; k++) {
			size_t size = sizes[k % 4];
			fill(mine, size, 0);
			wait_req(ucp_tag_send_nb(ep, mine, size, CONTIG, TAG_DATA + k % 4, on_send),
				 "send");
			memset(theirs, 0, BIG);
			recv_into(theirs, size, TAG_REPLY + k % 4, "reply");
			check(theirs, size, 0xff, "reply");
		}
		void *rk = get_file("server.rkey", &n);
		uint64_t *va = get_file("server.va", &n);
		ucp_rkey_h rkey;
		if (ucp_ep_rkey_unpack(ep, rk, &rkey))
			die("ucp_ep_rkey_unpack", 0);
		fill(mine, BIG, 0x5a);
		wait_req(ucp_put_nb(ep, mine, BIG, *va, rkey, on_send), "put");
		if (ucp_worker_flush(worker))
			die("ucp_worker_flush", 0);
		wait_req(ucp_tag_send_nb(ep, mine, 8, CONTIG, TAG_PUT_DONE, on_send), "put done");
		recv_into(theirs, 8, TAG_PUT_DONE, "bye");
	}
	printf("ucp_check ok\n");
	return 0;
}
