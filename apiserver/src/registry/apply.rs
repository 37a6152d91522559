//! Server-side apply at the registry: apply to the stored object, or create it from nothing.

use minik8s_api::ApiError;
use minik8s_api::strategy::Strategy;

use super::generic::{GenericRegistry, Part, Track};

impl<S: Strategy> GenericRegistry<S> {
    /// The applied object, pruned of fields its schema does not keep.
    fn decode_applied(&self, value: serde_json::Value) -> Result<S::Object, ApiError> {
        let mut obj = serde_json::from_value(value).map_err(|e| {
            ApiError::bad_request(format!(
                "the patched object is not a valid {}: {e}",
                self.strategy.info().kind
            ))
        })?;
        self.strategy.prune(&mut obj);
        Ok(obj)
    }

    /// Server-side apply: `apply` turns the stored object's JSON (`None` when there is none)
    /// into the new object's JSON. Returns the stored object and whether it was created.
    pub async fn apply<F>(
        &self,
        ns: Option<&str>,
        name: &str,
        part: Part,
        dry_run: bool,
        apply: F,
        track: Track<'_, S::Object>,
    ) -> Result<(S::Object, bool), ApiError>
    where
        F: Fn(Option<serde_json::Value>) -> Result<serde_json::Value, ApiError>,
    {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let updated = self
                .guaranteed_update_admitted(ns, name, None, dry_run, Some(part), |current| {
                    let current_rv = self.strategy.meta(&current).resource_version.clone();
                    let json = serde_json::to_value(&current).map_err(ApiError::internal)?;
                    let mut new = self.decode_applied(apply(Some(json))?)?;
                    let rv = self.strategy.meta(&new).resource_version.clone();
                    if rv.as_deref().is_some_and(|rv| !rv.is_empty()) && rv != current_rv {
                        return Err(ApiError::stale(self.target(name)));
                    }
                    self.check_patched_name(&mut new, ns, name)?;
                    self.before_update(&mut new, &current, part)?;
                    if let Some(track) = track {
                        track(&mut new, Some(&current));
                    }
                    Ok(new)
                })
                .await;
            let missing = match updated {
                Ok((obj, _)) => return Ok((obj, false)),
                Err(e) if e.code == 404 && e.details.as_ref().is_some_and(|d| d.name.is_some()) => {
                    e
                }
                Err(e) => return Err(e),
            };
            if part != Part::Main {
                return Err(missing);
            }
            let mut obj = self.decode_applied(apply(None)?)?;
            if let Some(uid) = self
                .strategy
                .meta(&obj)
                .uid
                .clone()
                .filter(|u| !u.is_empty())
            {
                return Err(ApiError::conflict(
                    self.target(name),
                    &format!(
                        "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
                    ),
                ));
            }
            self.check_patched_name(&mut obj, ns, name)?;
            match self.create_tracked(ns, obj, dry_run, None).await {
                Ok(obj) => return Ok((obj, true)),
                // Created meanwhile: apply to it instead.
                Err(e) if e.reason == "AlreadyExists" && attempts < 3 => continue,
                Err(e) => return Err(e),
            }
        }
    }
}
