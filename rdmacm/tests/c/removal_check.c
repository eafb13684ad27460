/* The drop-in librdmacm.so.1 when rnicd dies under a program blocked in
 * rdma_get_cm_event: a device removed. On an rnicd --mem-pair (t0
 * 127.0.0.1, t1 127.0.0.2) it makes three IDs on one event channel — a
 * listener on t0, an ID bound on t0 and one bound on t1 — prints READY
 * and waits in rdma_get_cm_event; the test then kills rnicd. Then: each
 * ID hears RDMA_CM_EVENT_DEVICE_REMOVAL exactly once, the next
 * rdma_get_cm_event fails with ENODEV (every device of the channel is
 * gone), rdma_listen, rdma_resolve_addr and binding a new ID fail with
 * ENODEV, and rdma_destroy_id and rdma_destroy_event_channel succeed.
 * Its own alarm ends it if anything waits for ever. Prints one line per
 * failed check and "N failures". */
#include <arpa/inet.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static struct sockaddr_in addr(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static struct rdma_cm_id *bound(struct rdma_event_channel *ch, const char *ip,
				int port)
{
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in a = addr(ip, port);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(id && rdma_bind_addr(id, (struct sockaddr *)&a) == 0,
	      "rdma_bind_addr %s:%d: errno %d", ip, port, errno);
	return id;
}

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 7480;
	alarm(30);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel");
	struct rdma_cm_id *ids[3] = {
		bound(ch, "127.0.0.1", port),
		bound(ch, "127.0.0.1", 0),
		bound(ch, "127.0.0.2", 0),
	};
	CHECK(rdma_listen(ids[0], 4) == 0, "rdma_listen: errno %d", errno);
	if (failures) {
		printf("%d failures\n", failures);
		return 1;
	}
	printf("READY\n");
	fflush(stdout);

	int heard[3] = { 0 };
	for (int n = 0; n < 3; n++) {
		struct rdma_cm_event *ev;
		if (rdma_get_cm_event(ch, &ev)) {
			CHECK(0, "event %d: rdma_get_cm_event: errno %d", n, errno);
			break;
		}
		printf("event %s status %d\n", rdma_event_str(ev->event),
		       ev->status);
		CHECK(ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL &&
			      ev->status == 0,
		      "event %d is %s", n, rdma_event_str(ev->event));
		for (int i = 0; i < 3; i++)
			heard[i] += ev->id == ids[i];
		CHECK(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event");
	}
	for (int i = 0; i < 3; i++)
		CHECK(heard[i] == 1, "ID %d heard DEVICE_REMOVAL %d times", i,
		      heard[i]);

	struct rdma_cm_event *ev;
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == ENODEV,
	      "rdma_get_cm_event after the removals: errno %d", errno);
	errno = 0;
	CHECK(rdma_listen(ids[1], 4) == -1 && errno == ENODEV,
	      "rdma_listen on a removed device: errno %d", errno);
	struct sockaddr_in dst = addr("127.0.0.2", port);
	errno = 0;
	CHECK(rdma_resolve_addr(ids[1], NULL, (struct sockaddr *)&dst, 1000) ==
			      -1 &&
		      errno == ENODEV,
	      "rdma_resolve_addr on a removed device: errno %d", errno);
	struct rdma_cm_id *late = NULL;
	struct sockaddr_in a = addr("127.0.0.1", 0);
	CHECK(rdma_create_id(ch, &late, NULL, RDMA_PS_TCP) == 0,
	      "rdma_create_id needs no device");
	errno = 0;
	CHECK(late && rdma_bind_addr(late, (struct sockaddr *)&a) == -1 &&
		      errno == ENODEV,
	      "rdma_bind_addr on a removed device: errno %d", errno);
	CHECK(rdma_destroy_id(late) == 0, "rdma_destroy_id of the late ID");
	for (int i = 0; i < 3; i++)
		CHECK(rdma_destroy_id(ids[i]) == 0, "rdma_destroy_id %d", i);
	rdma_destroy_event_channel(ch);
	printf("%d failures\n", failures);
	return failures != 0;
}
