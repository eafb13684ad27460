/* The drop-in librdmacm.so.1 from a C program built against rdma-core's
 * headers, on an rnicd --mem-pair (devices t0 127.0.0.1, t1 127.0.0.2)
 * through the libibverbs drop-in: the device list, an event channel whose
 * descriptor polls and honours O_NONBLOCK, IDs, address info, event
 * names, and the clear errors of what is not supported. Prints one line
 * per failed check and "N failures". */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

int main(void)
{
	int n = -1;
	struct ibv_context **devs = rdma_get_devices(&n);
	CHECK(devs && n == 2, "rdma_get_devices: %d devices", n);
	for (int i = 0; devs && i < n; i++)
		printf("device %s\n", ibv_get_device_name(devs[i]->device));
	CHECK(devs && devs[n] == NULL, "the list ends with NULL");
	rdma_free_devices(devs);

	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch && ch->fd >= 0, "rdma_create_event_channel");
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 0) == 0, "no event is readable yet");
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0,
	      "O_NONBLOCK");
	struct rdma_cm_event *ev;
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN,
	      "non-blocking rdma_get_cm_event: errno %d", errno);

	struct rdma_cm_id *id, *ib;
	CHECK(rdma_create_id(ch, &id, (void *)7, RDMA_PS_TCP) == 0,
	      "rdma_create_id");
	CHECK(id->channel == ch && id->context == (void *)7 &&
		      id->ps == RDMA_PS_TCP && id->qp_type == IBV_QPT_RC &&
		      id->verbs == NULL && id->qp == NULL,
	      "the new ID's fields");
	CHECK(rdma_create_id(ch, &ib, NULL, RDMA_PS_IB) == -1 &&
		      errno == EPROTONOSUPPORT,
	      "RDMA_PS_IB: errno %d", errno);

	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(7471) };
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&a, NULL) == -1 &&
		      errno == ENOSYS,
	      "rdma_join_multicast: errno %d", errno);
	CHECK(rsocket(AF_INET, SOCK_STREAM, 0) == -1 && errno == ENOSYS,
	      "rsocket: errno %d", errno);
	uint8_t tos = 0;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0,
	      "RDMA_OPTION_ID_TOS");

	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE | RAI_NUMERICHOST },
			     *res = NULL;
	CHECK(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res) == 0 && res &&
		      res->ai_src_addr &&
		      ((struct sockaddr_in *)res->ai_src_addr)->sin_port ==
			      htons(7471) &&
		      res->ai_port_space == RDMA_PS_TCP,
	      "rdma_getaddrinfo");
	rdma_freeaddrinfo(res);
	CHECK(!strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED),
		      "RDMA_CM_EVENT_ESTABLISHED"),
	      "rdma_event_str");

	/* what rnicd answers for a device's own address */
	int r = rdma_bind_addr(id, (struct sockaddr *)&a);
	printf("bind 127.0.0.1: %d errno %d\n", r, r ? errno : 0);

	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	rdma_destroy_event_channel(ch);
	printf("%d failures\n", failures);
	return failures != 0;
}
