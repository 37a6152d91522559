//! gRPC over unix sockets, as every device plugin API socket is: the kubelet's Registration
//! and PodResources sockets, and each plugin's own.

use std::io;
use std::path::Path;

use futures::Stream;
use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tonic::transport::{Channel, Endpoint, Uri};

/// A channel to the gRPC server on the socket at `path`, connected now: an error when nothing
/// listens there.
pub async fn connect(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    // The URI is never dialled: the connector below goes to the socket.
    Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
}

/// Listens on `path`, replacing whatever file was left there (a socket of a process that is
/// gone), and making its directory if need be.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    UnixListener::bind(path)
}

/// The connections a listener accepts, for `Server::serve_with_incoming`.
pub fn incoming(listener: UnixListener) -> impl Stream<Item = io::Result<UnixStream>> {
    futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}
