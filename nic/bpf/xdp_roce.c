// SPDX-License-Identifier: MIT OR Apache-2.0
//
// softrnic's XDP program: hand RoCEv2 frames (UDP destination port 4791
// over IPv4 or IPv6, untagged or behind up to two VLAN tags) and MAC
// control frames (EtherType 0x8808: PAUSE and PFC) to the AF_XDP socket
// bound to the receive queue; pass everything else (ARP, ICMP, the
// out-of-band TCP, ...) to the kernel.
//
// Two copies of one program: `xdp` for single-buffer frames and
// `xdp.frags` (BPF_F_XDP_HAS_FRAGS) for multi-buffer frames — what a
// 9000-byte MTU needs on veth and on drivers that split jumbo frames
// across pages. Only the first buffer is read: the headers are there.
//
// Built by nic/build.rs with `clang -O2 -g -target bpf`; loaded by
// nic/src/io/afxdp/bpf.rs, which creates the XSKMAP itself and patches the
// one map reference. Self-contained on purpose: only the kernel's UAPI
// headers (linux-libc-dev), no libbpf headers.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>

#define SEC(name) __attribute__((section(name), used))
#undef __always_inline
#define __always_inline inline __attribute__((always_inline))
/* BTF-defined map, as libbpf's bpf_helpers.h spells it */
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define be16(x) __builtin_bswap16(x)
#else
#define be16(x) (x)
#endif

#define ROCEV2_UDP_PORT 4791
#define ETH_P_MAC_CONTROL 0x8808 /* IEEE 802.3 Annex 31B PAUSE, 802.1Qbb PFC */
#define UDP_PROTO 17

static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)BPF_FUNC_redirect_map;

/* rx queue index -> AF_XDP socket; the loader sizes and fills it */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct vlan_tag {
	__be16 tci;
	__be16 proto;
};

static __always_inline int is_roce_or_mac_control(void *data, void *end)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return 0;
	__u16 proto = eth->h_proto;
	void *l3 = eth + 1;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != be16(ETH_P_8021Q) && proto != be16(ETH_P_8021AD))
			break;
		struct vlan_tag *tag = l3;
		if ((void *)(tag + 1) > end)
			return 0;
		proto = tag->proto;
		l3 = tag + 1;
	}
	if (proto == be16(ETH_P_MAC_CONTROL))
		return 1;
	struct udphdr *udp;
	if (proto == be16(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > end || ip->protocol != UDP_PROTO || ip->ihl < 5)
			return 0;
		/* a fragment other than the first carries no UDP header; RoCEv2
		 * sets DF and never fragments (RoCEv2 A17.4.5.1) */
		if (ip->frag_off & be16(0x3fff))
			return 0;
		udp = l3 + ip->ihl * 4;
	} else if (proto == be16(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > end || ip6->nexthdr != UDP_PROTO)
			return 0;
		udp = (void *)(ip6 + 1);
	} else {
		return 0;
	}
	if ((void *)(udp + 1) > end)
		return 0;
	return udp->dest == be16(ROCEV2_UDP_PORT);
}

static __always_inline int steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (!is_roce_or_mac_control(data, end))
		return XDP_PASS;
	/* no socket on this queue: the kernel gets the frame */
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

SEC("xdp")
int xdp_roce(struct xdp_md *ctx)
{
	return steer(ctx);
}

SEC("xdp.frags")
int xdp_roce_frags(struct xdp_md *ctx)
{
	return steer(ctx);
}

/* no GPL-only helper is used, so the repository's own licence will do */
char LICENSE[] SEC("license") = "MIT OR Apache-2.0";
