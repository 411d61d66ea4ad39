//! Label selector parsing checks, as `metav1.LabelSelectorAsSelector` makes
//! them (keys must be qualified names, values valid label values, `In`/`NotIn`
//! need values, `Exists`/`DoesNotExist` take none).

use crate::api::{LabelSelector, SelectorOperator};

const NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const DNS1123_SUBDOMAIN_FMT: &str =
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, non-empty.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A lowercase RFC 1123 subdomain (at most 253 characters).
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && !s.is_empty()
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            match (b.first(), b.last()) {
                (Some(f), Some(l)) => {
                    (f.is_ascii_lowercase() || f.is_ascii_digit())
                        && (l.is_ascii_lowercase() || l.is_ascii_digit())
                        && b.iter()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                }
                _ => false,
            }
        })
}

/// Problems with a label key (`validation.IsQualifiedName`).
fn qualified_name_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else if !is_dns1123_subdomain(prefix) {
                errs.push(format!(
                    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '{DNS1123_SUBDOMAIN_FMT}')"
                ));
            }
            name
        }
        _ => {
            return vec![format!(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{NAME_FMT}') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )]
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !name.is_empty() && !is_name_part(name) {
        errs.push(format!(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{NAME_FMT}')"
        ));
    }
    errs
}

/// Problems with a label value (`validation.IsValidLabelValue`).
fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !is_name_part(value) {
        errs.push(format!(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '({NAME_FMT})?')"
        ));
    }
    errs
}

fn check_key(key: &str) -> Result<(), String> {
    let errs = qualified_name_errors(key);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!("key: Invalid value: {key:?}: {}", errs.join("; ")))
    }
}

fn check_value(key: &str, index: usize, value: &str) -> Result<(), String> {
    let errs = label_value_errors(value);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "values[{index}][{key}]: Invalid value: {value:?}: {}",
            errs.join("; ")
        ))
    }
}

/// Checks that `selector` parses; the message says what does not.
pub(crate) fn validate(selector: &LabelSelector) -> Result<(), String> {
    for (key, value) in &selector.match_labels {
        check_key(key)?;
        check_value(key, 0, value)?;
    }
    for req in &selector.match_expressions {
        check_key(&req.key)?;
        match req.operator {
            SelectorOperator::In | SelectorOperator::NotIn => {
                if req.values.is_empty() {
                    return Err(
                        "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
                            .to_string(),
                    );
                }
            }
            SelectorOperator::Exists | SelectorOperator::DoesNotExist => {
                if !req.values.is_empty() {
                    return Err(format!(
                        "values: Invalid value: {:?}: values set must be empty for exists and does not exist",
                        req.values
                    ));
                }
            }
        }
        for (i, v) in req.values.iter().enumerate() {
            check_value(&req.key, i, v)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::LabelSelectorRequirement;

    fn expr(key: &str, operator: SelectorOperator, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_labels: Default::default(),
            match_expressions: vec![LabelSelectorRequirement {
                key: key.into(),
                operator,
                values: values.iter().map(|s| s.to_string()).collect(),
            }],
        }
    }

    #[test]
    fn valid_selectors() {
        for sel in [
            LabelSelector::default(),
            expr("app", SelectorOperator::In, &["a", "b-c.d_e"]),
            expr("example.com/app", SelectorOperator::NotIn, &[""]),
            expr("a", SelectorOperator::Exists, &[]),
            expr("a", SelectorOperator::DoesNotExist, &[]),
        ] {
            assert_eq!(validate(&sel), Ok(()), "{sel:?}");
        }
    }

    // matching_test.go "erroring namespace selector on otherwise matching rule
    // errors": key "key", In, ["bad value"] -> error mentioning "bad value";
    // and the "key " (trailing space) variant.
    #[test]
    fn invalid_selectors() {
        let e = validate(&expr("key", SelectorOperator::In, &["bad value"])).unwrap_err();
        assert!(e.contains("bad value"), "{e}");
        let e = validate(&expr("key ", SelectorOperator::In, &["v"])).unwrap_err();
        assert!(e.contains("name part"), "{e}");
        assert!(validate(&expr("a/b/c", SelectorOperator::Exists, &[])).is_err());
        assert!(validate(&expr("/b", SelectorOperator::Exists, &[])).is_err());
        assert!(validate(&expr("Bad_Prefix/b", SelectorOperator::Exists, &[])).is_err());
        assert!(validate(&expr("a", SelectorOperator::In, &[])).is_err());
        assert!(validate(&expr("a", SelectorOperator::Exists, &["x"])).is_err());
        assert!(validate(&expr(&"a".repeat(64), SelectorOperator::Exists, &[])).is_err());
        assert!(validate(&expr("a", SelectorOperator::In, &[&"v".repeat(64)])).is_err());
        let mut sel = LabelSelector::default();
        sel.match_labels.insert("ok".into(), "-bad".into());
        assert!(validate(&sel).is_err());
    }
}
