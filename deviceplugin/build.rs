//! Generates the gRPC code of upstream's device plugin and PodResources APIs from their
//! `.proto` files (kept as upstream defines them, so real plugins such as NVIDIA's speak to
//! this kubelet unchanged).

fn main() -> std::io::Result<()> {
    tonic_prost_build::configure().compile_protos(
        &[
            "proto/deviceplugin/v1beta1/api.proto",
            "proto/podresources/v1/api.proto",
        ],
        &["proto"],
    )
}
