//! What a task spec asks for, as the core's resource vector.
//!
//! Cores, GPUs and memory have kinds of their own; named custom resources are numbered
//! by the pilot in the order it first sees them. A resumed root replays submissions in
//! journal order, so every name gets its number again.

use saker_core::{MAX_CUSTOM, ResourceKind, Resources};

use saker_client::spec::TaskSpec;

/// A spec asks for one custom resource more than a pilot can number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "resource {name:?} would be custom kind {} of a pilot that numbers at most {MAX_CUSTOM} (it has {known:?})",
    MAX_CUSTOM + 1
)]
pub struct TooManyKinds {
    pub name: String,
    pub known: Vec<String>,
}

/// The pilot's custom resource names, by kind number.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ResourceNames {
    names: Vec<String>,
}

impl ResourceNames {
    /// What each task of `spec` needs, numbering names not seen before.
    pub fn vector(&mut self, spec: &TaskSpec) -> Result<Resources, TooManyKinds> {
        let mut needs = Resources::cores(spec.cores)
            .with(ResourceKind::GPUS, spec.gpus)
            .with(ResourceKind::MEMORY_MIB, spec.memory_mib);
        for (name, &amount) in &spec.resources {
            let kind = self.kind(name).ok_or_else(|| TooManyKinds {
                name: name.clone(),
                known: self.names.clone(),
            })?;
            needs = needs.with(kind, amount);
        }
        Ok(needs)
    }

    /// The kind of custom resource `name`, numbering it if it is new and there is
    /// room; `None` if there is not.
    pub fn kind(&mut self, name: &str) -> Option<ResourceKind> {
        let index = match self.names.iter().position(|known| known == name) {
            Some(index) => index,
            None if self.names.len() < MAX_CUSTOM => {
                self.names.push(name.to_owned());
                self.names.len() - 1
            }
            None => return None,
        };
        ResourceKind::custom(index)
    }

    /// The kind of custom resource `name`, if the pilot has numbered it.
    pub fn known(&self, name: &str) -> Option<ResourceKind> {
        let index = self.names.iter().position(|known| known == name)?;
        ResourceKind::custom(index)
    }

    /// The name of custom kind `index`, if the pilot has numbered one.
    pub fn name(&self, index: usize) -> Option<&str> {
        self.names.get(index).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(resources: &[(&str, u32)]) -> TaskSpec {
        let mut spec = TaskSpec::new(vec!["true".to_owned()]);
        spec.cores = 2;
        spec.gpus = 1;
        spec.memory_mib = 512;
        spec.resources = resources
            .iter()
            .map(|&(name, amount)| (name.to_owned(), amount))
            .collect();
        spec
    }

    #[test]
    fn names_are_numbered_in_the_order_first_seen_and_kept() {
        let mut names = ResourceNames::default();
        let first = names.vector(&spec(&[("licence", 3)])).unwrap();
        let second = names
            .vector(&spec(&[("scratch", 1), ("licence", 2)]))
            .unwrap();
        let licence = ResourceKind::custom(0).unwrap();
        let scratch = ResourceKind::custom(1).unwrap();
        assert_eq!(
            first,
            Resources::cores(2)
                .with(ResourceKind::GPUS, 1)
                .with(ResourceKind::MEMORY_MIB, 512)
                .with(licence, 3)
        );
        assert_eq!((second.get(licence), second.get(scratch)), (2, 1));
        assert_eq!(
            (names.name(0), names.name(1)),
            (Some("licence"), Some("scratch"))
        );
    }

    #[test]
    fn one_name_more_than_the_pilot_can_number_is_refused_and_changes_nothing() {
        let mut names = ResourceNames::default();
        let full: Vec<(String, u32)> = (0..MAX_CUSTOM).map(|i| (format!("r{i}"), 1)).collect();
        let full: Vec<(&str, u32)> = full.iter().map(|(n, a)| (n.as_str(), *a)).collect();
        names.vector(&spec(&full)).unwrap();
        let before = names.clone();
        let error = names.vector(&spec(&[("one-more", 1)])).unwrap_err();
        assert_eq!(error.name, "one-more");
        assert_eq!(names, before);
        assert!(
            names.vector(&spec(&[("r0", 4)])).is_ok(),
            "known names still work"
        );
    }
}
