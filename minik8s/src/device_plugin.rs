//! `minik8s device-plugin nvidia|fake`: device plugins as processes of their own, registering
//! with the kubelet of this machine through its device-plugins directory (the node's kubelet
//! keeps it at `<data-dir>/kubelet/device-plugins`; upstream's at
//! `/var/lib/kubelet/device-plugins`). The node also starts the NVIDIA plugin in-process when
//! the machine has NVIDIA GPUs ([`NvidiaMode`]).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use minik8s_deviceplugin::fake::{FakeArgs, run_fake};
use minik8s_deviceplugin::nvidia::{self, NvidiaArgs};

#[derive(Subcommand)]
pub enum DevicePluginCommand {
    /// Advertise this machine's NVIDIA GPUs as `nvidia.com/gpu`, giving each container its
    /// GPUs' device nodes and the driver's libraries and tools.
    Nvidia {
        #[command(flatten)]
        common: CommonArgs,
        /// Where the host's `/dev`, `/proc` and driver files are looked up.
        #[arg(long, default_value = "/")]
        root: PathBuf,
    },
    /// Advertise fake devices (files) as an extended resource, for tests and for clusters
    /// without the hardware. Listing device IDs in `<state-dir>/unhealthy` makes them
    /// Unhealthy.
    Fake {
        #[command(flatten)]
        common: CommonArgs,
        /// The extended resource (`<domain>/<name>`, outside kubernetes.io).
        #[arg(long, default_value = "example.com/dev")]
        resource: String,
        /// How many devices: `dev-0` .. `dev-<count-1>`.
        #[arg(long, default_value_t = 2)]
        count: usize,
        /// Where the device files and the `unhealthy` file are [default:
        /// `<data-dir>/device-plugins/<resource>`].
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Ask the kubelet for PreStartContainer before each container that holds a device.
        #[arg(long)]
        pre_start_required: bool,
    },
}

#[derive(Args)]
pub struct CommonArgs {
    /// The node's data directory; the kubelet's device-plugins directory is under it.
    #[arg(long, env = "MINIK8S_DATA_DIR", default_value = "/var/lib/minik8s")]
    data_dir: PathBuf,
    /// The kubelet's device-plugins directory [default: `<data-dir>/kubelet/device-plugins`].
    #[arg(long)]
    device_plugin_dir: Option<PathBuf>,
}

impl CommonArgs {
    fn device_plugin_dir(&self) -> PathBuf {
        self.device_plugin_dir
            .clone()
            .unwrap_or_else(|| device_plugin_dir(&self.data_dir))
    }
}

/// The device-plugins directory of the node kubelet that keeps its files in `data_dir`.
pub fn device_plugin_dir(data_dir: &Path) -> PathBuf {
    data_dir
        .join("kubelet")
        .join(minik8s_deviceplugin::DEVICE_PLUGINS_DIR)
}

pub async fn run(command: DevicePluginCommand) -> anyhow::Result<()> {
    match command {
        DevicePluginCommand::Nvidia { common, root } => {
            if !nvidia::present(&root) {
                anyhow::bail!(
                    "no NVIDIA GPU: no {} device",
                    root.join("dev/nvidia0").display()
                );
            }
            nvidia::run_nvidia(NvidiaArgs {
                root,
                device_plugin_dir: common.device_plugin_dir(),
            })
            .await
            .context("the NVIDIA device plugin stopped")
        }
        DevicePluginCommand::Fake {
            common,
            resource,
            count,
            state_dir,
            pre_start_required,
        } => {
            if !minik8s_deviceplugin::is_extended_resource_name(&resource) {
                anyhow::bail!(
                    "{resource:?} is not an extended resource name (<domain>/<name> outside kubernetes.io)"
                );
            }
            let state_dir = state_dir.unwrap_or_else(|| {
                common
                    .data_dir
                    .join("device-plugins")
                    .join(resource.replace('/', "_"))
            });
            let mut args = FakeArgs::new(&resource, count, &common.device_plugin_dir(), &state_dir);
            args.pre_start_required = pre_start_required;
            run_fake(args)
                .await
                .with_context(|| format!("the fake device plugin of {resource} stopped"))
        }
    }
}

/// Whether the node runs the NVIDIA plugin in-process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum NvidiaMode {
    /// When the machine has `/dev/nvidia0` (or another GPU device node).
    #[default]
    Auto,
    True,
    False,
}

/// Starts the NVIDIA plugin beside the node's kubelet (whose root is `<data_dir>/kubelet`)
/// when `mode` says so; it waits for the kubelet's socket and registers with it.
pub fn start_nvidia(mode: NvidiaMode, data_dir: &Path) {
    let root = PathBuf::from("/");
    let wanted = match mode {
        NvidiaMode::False => false,
        NvidiaMode::True => true,
        NvidiaMode::Auto => nvidia::present(&root),
    };
    if !wanted {
        return;
    }
    let args = NvidiaArgs {
        root,
        device_plugin_dir: device_plugin_dir(data_dir),
    };
    tokio::spawn(async move {
        if let Err(e) = nvidia::run_nvidia(args).await {
            tracing::error!(error = %e, "the NVIDIA device plugin stopped");
        }
    });
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: DevicePluginCommand,
    }

    #[test]
    fn fake_flags_and_default_directories() {
        let cli = Cli::try_parse_from([
            "device-plugin",
            "fake",
            "--resource",
            "example.com/dev",
            "--count",
            "3",
            "--data-dir",
            "/tmp/m",
        ])
        .unwrap();
        let DevicePluginCommand::Fake {
            common,
            resource,
            count,
            state_dir,
            pre_start_required,
        } = cli.command
        else {
            unreachable!("a fake command");
        };
        assert_eq!(
            (resource.as_str(), count, state_dir, pre_start_required),
            ("example.com/dev", 3, None, false)
        );
        assert_eq!(
            common.device_plugin_dir(),
            Path::new("/tmp/m/kubelet/device-plugins")
        );
        let cli = Cli::try_parse_from([
            "device-plugin",
            "nvidia",
            "--device-plugin-dir",
            "/var/lib/kubelet/device-plugins",
        ])
        .unwrap();
        let DevicePluginCommand::Nvidia { common, root } = cli.command else {
            unreachable!("an nvidia command");
        };
        assert_eq!(root, Path::new("/"));
        assert_eq!(
            common.device_plugin_dir(),
            Path::new("/var/lib/kubelet/device-plugins")
        );
    }
}
