//! The baseline of every row: messages over one raw QUIC stream between two
//! endpoints of this process (TLS 1.3, the pilot's own certificates).

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Instant;

/// Two QUIC endpoints in this process, one bi-directional stream between them; the
/// far end answers each message with one of a given size.
pub struct RawQuic {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    _dir: tempfile::TempDir,
    _endpoints: (quinn::Endpoint, quinn::Endpoint),
}

impl RawQuic {
    pub async fn start() -> Result<RawQuic, String> {
        use saker_transport::credentials::{Credentials, Role};
        let error = |e: &dyn std::fmt::Display| e.to_string();
        saker_transport::crypto::install_crypto_provider().map_err(|e| error(&e))?;
        let dir = tempfile::tempdir().map_err(|e| error(&e))?;
        let pilot = saker_transport::pilot_dir::PilotDir::create(dir.path().join("p"))
            .map_err(|e| error(&e))?;
        Credentials::generate_into(&pilot).map_err(|e| error(&e))?;
        let root = Credentials::load(&pilot, Role::Root).map_err(|e| error(&e))?;
        let agent = Credentials::load(&pilot, Role::Agent).map_err(|e| error(&e))?;
        let timeouts = saker_actors::liveness::Liveness::default().quic_timeouts();
        let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let quic = saker_transport::quic::server_config(&root, &timeouts).map_err(|e| error(&e))?;
        let client =
            saker_transport::quic::client_config(&agent, &timeouts).map_err(|e| error(&e))?;
        let server = saker_transport::quic::bind_endpoint(any, Some(quic), client.clone())
            .map_err(|e| error(&e))?;
        let dialer =
            saker_transport::quic::bind_endpoint(any, None, client).map_err(|e| error(&e))?;
        let address = server.local_addr().map_err(|e| error(&e))?;
        let accepting = server.clone();
        tokio::spawn(async move {
            let Some(incoming) = accepting.accept().await else {
                return;
            };
            let Ok(connection) = incoming.await else {
                return;
            };
            let Ok((mut send, mut recv)) = connection.accept_bi().await else {
                return;
            };
            // Each message: u32 length, u32 answer length, body; answered in kind.
            let mut header = [0u8; 8];
            let mut body = Vec::new();
            while recv.read_exact(&mut header).await.is_ok() {
                let length = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
                let answer = u32::from_le_bytes(header[4..].try_into().unwrap()) as usize;
                body.resize(length, 0);
                if recv.read_exact(&mut body).await.is_err() {
                    return;
                }
                body.resize(answer.max(4), 0);
                body[..4].copy_from_slice(&(answer as u32).to_le_bytes());
                if send.write_all(&body[..answer.max(4)]).await.is_err() {
                    return;
                }
            }
        });
        let connection = saker_transport::quic::connect(&dialer, address, Role::Root)
            .await
            .map_err(|e| error(&e))?;
        let (send, recv) = connection.open_bi().await.map_err(|e| error(&e))?;
        Ok(RawQuic {
            send,
            recv,
            _dir: dir,
            _endpoints: (server, dialer),
        })
    }

    /// Items per second when `items` go in messages of `per_message`, each `bytes`
    /// long and answered with `answer` bytes; the writer runs ahead of the answers
    /// as far as QUIC's flow control lets it.
    pub async fn throughput(
        &mut self,
        items: usize,
        per_message: usize,
        bytes: usize,
        answer: usize,
    ) -> Result<f64, String> {
        let messages = items.div_ceil(per_message);
        let started = Instant::now();
        self.exchange(messages, bytes, answer).await?;
        Ok(items as f64 / started.elapsed().as_secs_f64())
    }

    /// Microseconds of each of `count` sequential exchanges.
    pub async fn round_trips(
        &mut self,
        count: usize,
        bytes: usize,
        answer: usize,
    ) -> Result<Vec<u64>, String> {
        let mut samples = Vec::with_capacity(count);
        for _ in 0..count {
            let started = Instant::now();
            self.exchange(1, bytes, answer).await?;
            samples.push(started.elapsed().as_micros() as u64);
        }
        Ok(samples)
    }

    async fn exchange(
        &mut self,
        messages: usize,
        bytes: usize,
        answer: usize,
    ) -> Result<(), String> {
        let answer = answer.max(4);
        let mut message = vec![0u8; 8 + bytes];
        message[..4].copy_from_slice(&(bytes as u32).to_le_bytes());
        message[4..8].copy_from_slice(&(answer as u32).to_le_bytes());
        let RawQuic { send, recv, .. } = self;
        let writing = async {
            for _ in 0..messages {
                send.write_all(&message).await.map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        };
        let reading = async {
            let mut buffer = vec![0u8; answer];
            for _ in 0..messages {
                recv.read_exact(&mut buffer)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        };
        let (written, read) = tokio::join!(writing, reading);
        written.and(read)
    }
}
