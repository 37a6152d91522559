//! `delete` removes the Function; what it owns (its Service, and so its revisions and pods)
//! goes with it by garbage collection, as after `kubectl delete`.

use clap::Args;
use knative_lite::function::Function;
use kube::api::{Api, DeleteParams};

use crate::client::{ClientArgs, is_reason};

#[derive(Args, Debug)]
pub struct DeleteArgs {
    /// The Function's name.
    pub name: String,
}

pub async fn run(cluster: &ClientArgs, args: DeleteArgs) -> anyhow::Result<()> {
    let cluster = cluster.connect().await?;
    let api: Api<Function> = Api::namespaced(cluster.client, &cluster.namespace);
    match api.delete(&args.name, &DeleteParams::default()).await {
        Ok(_) => {
            println!("function.functions.minik8s.io \"{}\" deleted", args.name);
            Ok(())
        }
        Err(e) if is_reason(&e, "NotFound") => Err(not_found(&args.name).into()),
        Err(e) => Err(e.into()),
    }
}

/// The API's NotFound, worded as kubectl words it whatever the server's message.
fn not_found(name: &str) -> kube::Error {
    let message = format!("functions.functions.minik8s.io \"{name}\" not found");
    kube::Error::Api(
        kube::core::Status::failure(&message, "NotFound")
            .with_code(404)
            .boxed(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_prints_like_kubectl() {
        let err = anyhow::Error::from(not_found("hello"));
        assert_eq!(
            crate::client::error_message(&err),
            "Error from server (NotFound): functions.functions.minik8s.io \"hello\" not found"
        );
    }
}
