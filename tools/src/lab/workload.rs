//! What a lab runs: the workload's kind (`[workload] kind`, `--workload`)
//! and, for the MPI collectives, which UCX transports carry it
//! (`[workload] ucx_tls`, `--ucx-tls`).

/// The workload of a lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// `ib_write_bw` h1..h(N-1) → h0 ([`super::incast`]).
    Incast,
    /// MPI_Allreduce over every host, one rank each ([`super::collective`]).
    Allreduce,
    /// MPI_Alltoall over every host, one rank each.
    Alltoall,
    /// A replayed trace of flows ([`super::trace`], [`super::replay`]).
    Trace,
}

impl Workload {
    /// The kind of a lab file's word for it.
    pub fn parse(s: &str) -> Option<Workload> {
        match s {
            "incast" => Some(Workload::Incast),
            "allreduce" => Some(Workload::Allreduce),
            "alltoall" => Some(Workload::Alltoall),
            "trace" => Some(Workload::Trace),
            _ => None,
        }
    }

    /// The lab file's word for it (also the collective program's argument).
    pub fn word(self) -> &'static str {
        match self {
            Workload::Incast => "incast",
            Workload::Allreduce => "allreduce",
            Workload::Alltoall => "alltoall",
            Workload::Trace => "trace",
        }
    }

    /// Whether it is an MPI collective, where every host sends and receives.
    pub fn is_collective(self) -> bool {
        matches!(self, Workload::Allreduce | Workload::Alltoall)
    }

    /// The first host that sends: h1 in the incast (h0 only receives),
    /// h0 in a collective or a trace (any host may send).
    pub fn first_sender(self) -> usize {
        usize::from(self == Workload::Incast)
    }

    /// Its message size when the lab file gives none: ib_write_bw's 64 KiB
    /// writes, a collective's 1 MiB.
    pub fn default_size(self) -> u32 {
        match self {
            Workload::Incast | Workload::Trace => 65536,
            _ => 1 << 20,
        }
    }
}

/// The transports UCX may use for a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UcxTls {
    /// The verbs transports of the host's rnicd (`rc_verbs,ud_verbs,self`).
    Rdma,
    /// TCP sockets on the host's veth (`tcp,self`): the RNIC is bypassed,
    /// the silent fallback of a job whose RDMA setup is broken.
    Tcp,
}

impl UcxTls {
    /// The setting's word for it.
    pub fn parse(s: &str) -> Option<UcxTls> {
        match s {
            "rdma" => Some(UcxTls::Rdma),
            "tcp" => Some(UcxTls::Tcp),
            _ => None,
        }
    }

    /// The lab file's word for it.
    pub fn word(self) -> &'static str {
        match self {
            UcxTls::Rdma => "rdma",
            UcxTls::Tcp => "tcp",
        }
    }

    /// `UCX_TLS`.
    pub fn tls(self) -> &'static str {
        match self {
            UcxTls::Rdma => "rc_verbs,ud_verbs,self",
            UcxTls::Tcp => "tcp,self",
        }
    }
}
