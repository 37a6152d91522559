//! The device manager's checkpoint, `<root>/device-plugins/kubelet_internal_checkpoint`, in
//! upstream's JSON shape (`Data.PodDeviceEntries`, `Data.RegisteredDevices`, `Checksum`), so
//! that a restarted kubelet gives each container the devices it had, and the checkpoint reads
//! the same to tools that know upstream's. The checksum is FNV-1a over the JSON of `Data`:
//! upstream's is over Go's printing of the struct, which nothing here can reproduce, so a file
//! written by upstream's kubelet is not taken (as upstream does with a checksum that fails).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use base64::Engine;
use prost::Message;
use serde::{Deserialize, Serialize};

use minik8s_deviceplugin::api::v1beta1::ContainerAllocateResponse;

pub const FILE: &str = "kubelet_internal_checkpoint";

/// Upstream's key for devices without NUMA topology.
const NO_TOPOLOGY: &str = "-1";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PodDevicesEntry {
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    pub container_name: String,
    pub resource_name: String,
    /// Device IDs by NUMA node.
    #[serde(rename = "DeviceIDs")]
    pub device_ids: BTreeMap<String, Vec<String>>,
    /// The plugin's Allocate answer for the container, protobuf encoded (base64 in JSON, as
    /// Go writes `[]byte`).
    #[serde(with = "bytes_base64")]
    pub alloc_resp: Vec<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CheckpointData {
    pub pod_device_entries: Vec<PodDevicesEntry>,
    /// The healthy devices of each registered resource.
    pub registered_devices: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct File {
    data: CheckpointData,
    checksum: u64,
}

mod bytes_base64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = Option::<String>::deserialize(d)?.unwrap_or_default();
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(serde::de::Error::custom)
    }
}

fn checksum(data: &CheckpointData) -> u64 {
    let bytes = serde_json::to_vec(data).unwrap_or_default();
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    u64::from(h)
}

impl PodDevicesEntry {
    pub fn new(
        pod_uid: &str,
        container: &str,
        resource: &str,
        ids: &[String],
        response: &ContainerAllocateResponse,
    ) -> Self {
        PodDevicesEntry {
            pod_uid: pod_uid.into(),
            container_name: container.into(),
            resource_name: resource.into(),
            device_ids: BTreeMap::from([(NO_TOPOLOGY.to_string(), ids.to_vec())]),
            alloc_resp: response.encode_to_vec(),
        }
    }

    /// Every device, whatever its NUMA node.
    pub fn ids(&self) -> Vec<String> {
        self.device_ids.values().flatten().cloned().collect()
    }

    pub fn response(&self) -> ContainerAllocateResponse {
        ContainerAllocateResponse::decode(self.alloc_resp.as_slice()).unwrap_or_default()
    }
}

/// Writes the checkpoint whole (a new file renamed over the old one).
pub fn write(dir: &Path, data: &CheckpointData) -> io::Result<()> {
    let file = File {
        checksum: checksum(data),
        data: data.clone(),
    };
    let tmp = dir.join(format!(".{FILE}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(&file)?)?;
    std::fs::rename(tmp, dir.join(FILE))
}

/// Reads the checkpoint: `None` when there is none, an error when it is corrupt.
pub fn read(dir: &Path) -> io::Result<Option<CheckpointData>> {
    let bytes = match std::fs::read(dir.join(FILE)) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let file: File = serde_json::from_slice(&bytes)?;
    if checksum(&file.data) != file.checksum {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "checkpoint is corrupted",
        ));
    }
    Ok(Some(file.data))
}

/// Base64 as the checkpoint writes it (for tests that look at the file).
pub fn encode_base64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_in_upstreams_shape() {
        let dir = tempfile::tempdir().unwrap();
        let response = ContainerAllocateResponse {
            envs: [("A".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        let data = CheckpointData {
            pod_device_entries: vec![PodDevicesEntry::new(
                "uid-1",
                "c",
                "example.com/dev",
                &["dev-0".into()],
                &response,
            )],
            registered_devices: [("example.com/dev".to_string(), vec!["dev-0".to_string()])].into(),
        };
        write(dir.path(), &data).unwrap();
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(FILE)).unwrap()).unwrap();
        let entry = &json["Data"]["PodDeviceEntries"][0];
        assert_eq!(entry["PodUID"], "uid-1");
        assert_eq!(entry["ContainerName"], "c");
        assert_eq!(entry["ResourceName"], "example.com/dev");
        assert_eq!(entry["DeviceIDs"]["-1"][0], "dev-0");
        assert_eq!(entry["AllocResp"], encode_base64(&response.encode_to_vec()));
        assert_eq!(
            json["Data"]["RegisteredDevices"]["example.com/dev"][0],
            "dev-0"
        );
        assert!(json["Checksum"].is_u64());
        let back = read(dir.path()).unwrap().unwrap();
        assert_eq!(back, data);
        assert_eq!(back.pod_device_entries[0].response(), response);
        // A changed file fails its checksum.
        let tampered = std::fs::read_to_string(dir.path().join(FILE))
            .unwrap()
            .replace("dev-0", "dev-1");
        std::fs::write(dir.path().join(FILE), tampered).unwrap();
        assert!(read(dir.path()).is_err());
    }
}
