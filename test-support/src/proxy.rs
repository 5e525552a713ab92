//! A fault-injecting TCP proxy the test owns, in front of a listener (a
//! raft-store member's Raft port, say). Callers that bind their outgoing
//! sockets to addresses of their own (127.0.0.N) are told apart by source
//! address, so the proxy can cut any directed link — a network partition
//! without touching the host's firewall. Cutting a link also closes its
//! open connections, so pooled keep-alive connections cannot leak through
//! a partition.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug)]
pub struct LinkProxy {
    pub addr: SocketAddr,
    blocked: Arc<Mutex<HashSet<IpAddr>>>,
    changed: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl LinkProxy {
    /// Listens on `listen` and forwards every connection to `target`.
    pub async fn start(listen: SocketAddr, target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let blocked: Arc<Mutex<HashSet<IpAddr>>> = Arc::default();
        let (changed, _) = watch::channel(0u64);
        let task = {
            let blocked = blocked.clone();
            let changed = changed.clone();
            tokio::spawn(async move {
                while let Ok((inbound, peer)) = listener.accept().await {
                    if blocked.lock().unwrap().contains(&peer.ip()) {
                        continue; // dropped: the caller sees a reset
                    }
                    let blocked = blocked.clone();
                    let mut generation = changed.subscribe();
                    tokio::spawn(async move {
                        let Ok(mut outbound) = TcpStream::connect(target).await else {
                            return;
                        };
                        let mut inbound = inbound;
                        let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
                        tokio::pin!(copy);
                        loop {
                            tokio::select! {
                                _ = &mut copy => return,
                                change = generation.changed() => {
                                    if change.is_err() || blocked.lock().unwrap().contains(&peer.ip()) {
                                        return; // both sockets close on drop
                                    }
                                }
                            }
                        }
                    });
                }
            })
        };
        Ok(Self {
            addr,
            blocked,
            changed,
            task,
        })
    }

    /// Drops traffic from `source` (both directions of its connections).
    pub fn block(&self, source: IpAddr) {
        self.blocked.lock().unwrap().insert(source);
        self.changed.send_modify(|g| *g += 1);
    }

    pub fn heal(&self) {
        self.blocked.lock().unwrap().clear();
        self.changed.send_modify(|g| *g += 1);
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
