//! Counters, named as users know them from `rdma statistic` (mlx5 and rxe
//! hardware counters) so that scripts written for real RNICs read ours.

macro_rules! counters {
    ($($(#[doc = $doc:expr])* $name:ident,)*) => {
        /// Transport counters of one QP or of a whole device.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct Counters {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl Counters {
            /// Every counter name, in a stable order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// (name, value) pairs in `NAMES` order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($name), self.$name)),*].into_iter()
            }

            /// Adds `other` into `self`.
            pub fn add(&mut self, other: &Counters) {
                $(self.$name += other.$name;)*
            }

            /// The value of a counter by name.
            pub fn get(&self, name: &str) -> Option<u64> {
                match name {
                    $(stringify!($name) => Some(self.$name),)*
                    _ => None,
                }
            }
        }
    };
}

counters! {
    /// RoCE packets sent (rxe: sent_pkts).
    sent_pkts,
    /// RoCE packets received and delivered to a QP (rxe: rcvd_pkts).
    rcvd_pkts,
    /// Requests that arrived with a PSN ahead of the expected one.
    out_of_sequence,
    /// Requests that arrived with an already-seen PSN.
    duplicate_request,
    /// NAK-sequence-error packets received by the requester.
    packet_seq_err,
    /// Local ACK timeouts of the requester.
    local_ack_timeout_err,
    /// RNR NAKs received by the requester.
    rnr_nak_retry_err,
    /// ACKs that skipped over an outstanding READ or atomic (implied NAK).
    implied_nak_seq_err,
    /// Requests that found no receive WQE (RNR NAK sent, or dropped on UC/UD).
    out_of_buffer,
    /// Remote access error NAKs received by the requester.
    req_remote_access_errors,
    /// Invalid request NAKs received by the requester.
    req_remote_invalid_request,
    /// Remote operational error NAKs received by the requester.
    req_remote_operational_error,
    /// Remote access errors detected by the responder (NAK sent).
    resp_remote_access_errors,
    /// Length errors detected by the responder.
    resp_local_length_error,
    /// Invalid requests detected by the responder (NAK sent).
    resp_invalid_request,
    /// Error completions of send WQEs (flushes excluded).
    req_cqe_error,
    /// Error completions of receive WQEs (flushes excluded).
    resp_cqe_error,
    /// Send WQEs completed with a flush error.
    req_cqe_flush_error,
    /// Receive WQEs completed with a flush error.
    resp_cqe_flush_error,
    /// Transport retry counter exhausted (rxe: retry_exceeded_err).
    retry_exceeded_err,
    /// RNR retry counter exhausted (rxe: retry_rnr_exceeded_err).
    retry_rnr_exceeded_err,
    /// Request packets sent again (go-back-N).
    retransmitted_pkts,
    /// RDMA WRITE requests received.
    rx_write_requests,
    /// RDMA READ requests received.
    rx_read_requests,
    /// Atomic requests received.
    rx_atomic_requests,
    /// SENDs received (rxe: rdma_recvs counts received SEND messages).
    rdma_recvs,
    /// SEND messages sent (rxe: rdma_sends).
    rdma_sends,
    /// UD packets dropped for a Q_Key mismatch.
    qkey_violation,
    /// Packets dropped because the QP was not in a state to take them.
    rx_qp_state_drop,
    /// Completion queue overruns.
    cq_overrun,
    /// Asynchronous events dropped because nobody took them (over 1024 kept).
    async_events_dropped,
    /// CE-marked RoCE packets received (notification point).
    np_ecn_marked_roce_packets,
    /// CNPs sent (notification point).
    np_cnp_sent,
    /// CNPs that cut the QP's rate (reaction point).
    rp_cnp_handled,
    /// CNPs received while DCQCN is off.
    rp_cnp_ignored,
}
