//! The requests the cluster runner sends: plain JSON over the kube client's
//! connection, as the admin of the kubeconfig or impersonating a case's user.

use crate::request::UserInfo;
use http_body_util::BodyExt as _;
use hyper::http::{self, Method};
use serde_json::Value as Json;

/// The field manager of every object the runner writes.
pub const FIELD_MANAGER: &str = "kmutate-conformance";

/// What the apiserver answered.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A 2xx with its object and the `Warning` headers' texts.
    Object {
        /// The object.
        object: Json,
        /// The warnings.
        warnings: Vec<String>,
    },
    /// A refusal: the HTTP code and the Status message (or the body).
    Refused {
        /// HTTP code.
        code: u16,
        /// The message.
        message: String,
    },
}

impl Answer {
    /// The object of a 2xx, else the refusal as text.
    pub fn object(self) -> Result<Json, String> {
        match self {
            Answer::Object { object, .. } => Ok(object),
            Answer::Refused { code, message } => Err(format!("{code}: {message}")),
        }
    }

    /// Whether it is a refusal with `code`.
    pub fn is_refused_with(&self, wanted: u16) -> bool {
        matches!(self, Answer::Refused { code, .. } if *code == wanted)
    }
}

/// Where a kind's objects live: its API path and resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Collection {
    /// API group ("" for the core group).
    pub group: String,
    /// Version.
    pub version: String,
    /// Resource (plural).
    pub resource: String,
    /// The namespace, for a namespaced resource.
    pub namespace: Option<String>,
}

impl Collection {
    /// `/api/v1[/namespaces/NS]/RESOURCE` or `/apis/GROUP/VERSION/...`.
    pub fn path(&self) -> String {
        let root = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match &self.namespace {
            Some(ns) => format!("{root}/namespaces/{ns}/{}", self.resource),
            None => format!("{root}/{}", self.resource),
        }
    }

    /// The path of the object `name` (and its `subresource`, when not empty).
    pub fn object_path(&self, name: &str, subresource: &str) -> String {
        if subresource.is_empty() {
            format!("{}/{name}", self.path())
        } else {
            format!("{}/{name}/{subresource}", self.path())
        }
    }
}

/// A client of the cluster under test.
#[derive(Clone)]
pub struct Apiserver {
    client: kube::Client,
}

impl Apiserver {
    /// A client from the kube client.
    pub fn new(client: kube::Client) -> Apiserver {
        Apiserver { client }
    }

    /// Sends `method` to `path?query` with `body`, as `user` (impersonated)
    /// or as the admin. `Err` is a transport error.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        query: &str,
        body: Option<&Json>,
        user: Option<&UserInfo>,
    ) -> Result<Answer, String> {
        let uri = if query.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{query}")
        };
        let bytes = match body {
            Some(b) => serde_json::to_vec(b).map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        let mut builder = http::Request::builder()
            .method(method.clone())
            .uri(&uri)
            .header("Accept", "application/json");
        if body.is_some() {
            builder = builder.header("Content-Type", "application/json");
        }
        if let Some(u) = user {
            builder = builder.header("Impersonate-User", &u.username);
            for g in &u.groups {
                builder = builder.header("Impersonate-Group", g);
            }
            if !u.uid.is_empty() {
                builder = builder.header("Impersonate-Uid", &u.uid);
            }
            for (key, values) in &u.extra {
                let header = format!("Impersonate-Extra-{}", percent_encode(key));
                for v in values {
                    builder = builder.header(header.as_str(), v);
                }
            }
        }
        let request = builder
            .body(kube::client::Body::from(bytes))
            .map_err(|e| format!("{method} {uri}: {e}"))?;
        let response = self
            .client
            .send(request)
            .await
            .map_err(|e| format!("{method} {uri}: {e}"))?;
        let code = response.status().as_u16();
        let warnings = response
            .headers()
            .get_all("Warning")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(warning_text)
            .collect();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{method} {uri}: reading the answer: {e}"))?
            .to_bytes();
        let json: Json = serde_json::from_slice(&body).unwrap_or(Json::Null);
        if (200..300).contains(&code) {
            Ok(Answer::Object {
                object: json,
                warnings,
            })
        } else {
            let message = json
                .get("message")
                .and_then(Json::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
            Ok(Answer::Refused { code, message })
        }
    }

    /// Creates `object` in `collection` as the admin.
    pub async fn create(&self, collection: &Collection, object: &Json) -> Result<Answer, String> {
        let query = format!("fieldManager={FIELD_MANAGER}");
        self.send(Method::POST, &collection.path(), &query, Some(object), None)
            .await
    }

    /// Reads `name` of `collection` as the admin.
    pub async fn get(&self, collection: &Collection, name: &str) -> Result<Answer, String> {
        self.send(
            Method::GET,
            &collection.object_path(name, ""),
            "",
            None,
            None,
        )
        .await
    }

    /// Replaces `name` of `collection` with `object` as the admin.
    pub async fn replace(
        &self,
        collection: &Collection,
        name: &str,
        object: &Json,
    ) -> Result<Answer, String> {
        let query = format!("fieldManager={FIELD_MANAGER}");
        self.send(
            Method::PUT,
            &collection.object_path(name, ""),
            &query,
            Some(object),
            None,
        )
        .await
    }

    /// Deletes `name` of `collection` as the admin (gone already is fine).
    pub async fn delete(&self, collection: &Collection, name: &str) -> Result<(), String> {
        let answer = self
            .send(
                Method::DELETE,
                &collection.object_path(name, ""),
                "",
                None,
                None,
            )
            .await?;
        match answer {
            Answer::Object { .. } => Ok(()),
            Answer::Refused { code: 404, .. } => Ok(()),
            Answer::Refused { code, message } => Err(format!(
                "deleting {}: {code}: {message}",
                collection.object_path(name, "")
            )),
        }
    }
}

/// `%`-encodes what a header name may not hold (upstream's
/// Impersonate-Extra keys are percent-encoded).
fn percent_encode(key: &str) -> String {
    key.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~!#$&'*+^`|".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The text of a `Warning: 299 - "text"` header.
fn warning_text(header: &str) -> String {
    let rest = header
        .trim()
        .strip_prefix("299")
        .map(str::trim_start)
        .and_then(|r| r.strip_prefix('-'))
        .map(str::trim);
    match rest {
        Some(quoted) if quoted.len() >= 2 && quoted.starts_with('"') => {
            let inner = &quoted[1..];
            let end = inner.rfind('"').unwrap_or(inner.len());
            inner[..end].replace("\\\"", "\"").replace("\\\\", "\\")
        }
        _ => header.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_core_and_group_resources() {
        let c = Collection {
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
            namespace: Some("ns".into()),
        };
        assert_eq!(
            c.object_path("p", "status"),
            "/api/v1/namespaces/ns/pods/p/status"
        );
        let c = Collection {
            group: "rbac.authorization.k8s.io".into(),
            version: "v1".into(),
            resource: "clusterroles".into(),
            namespace: None,
        };
        assert_eq!(c.path(), "/apis/rbac.authorization.k8s.io/v1/clusterroles");
    }

    #[test]
    fn warning_headers_give_their_text() {
        assert_eq!(warning_text(r#"299 - "a \"b\" c""#), r#"a "b" c"#);
        assert_eq!(warning_text("odd"), "odd");
        assert_eq!(percent_encode("a/b"), "a%2Fb");
    }
}
