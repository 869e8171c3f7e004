//! The local stack's fault injector (docs/src/fault-injector.md): rules added through the
//! router's control endpoint, for the faults the emulators never produce. Each test names its
//! own client (the AWS SDK's app name), so the rules of tests running at once never meet.

use aws_config::AppName;
use serde_json::{Value, json};

/// The rules one test added; dropping it removes them.
pub struct Injector {
    endpoint: String,
    client: String,
    ids: Vec<String>,
}

impl Injector {
    /// An injector for requests of `client`, a name unique to the test.
    pub fn new(endpoint: &str, client: &str) -> Self {
        Self {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            client: client.to_owned(),
            ids: Vec::new(),
        }
    }

    /// The AWS configuration of this injector's client: the local stack's, with its app name.
    pub fn sdk_config(&self) -> aws_config::SdkConfig {
        ruststream_kinesis::local_stack_config(&self.endpoint)
            .into_builder()
            .app_name(AppName::new(self.client.clone()).expect("a valid app name"))
            .build()
    }

    /// Adds a rule for this client's requests of `service` and `operation`; answers its id.
    pub fn add(
        &mut self,
        service: &str,
        operation: &str,
        action: Value,
        count: Option<u64>,
    ) -> String {
        let mut rule = json!({
            "service": service,
            "operation": operation,
            "client": self.client,
            "action": action,
        });
        if let Some(count) = count {
            rule["count"] = json!(count);
        }
        let answer: Value = ureq::post(&format!("{}/_faults", self.endpoint))
            .send_json(rule)
            .expect("the router takes the rule")
            .into_json()
            .expect("the router answers JSON");
        let id = answer["id"].as_str().expect("an id").to_owned();
        self.ids.push(id.clone());
        id
    }

    /// How many requests rule `id` acted on.
    pub fn hits(&self, id: &str) -> u64 {
        let rule: Value = ureq::get(&format!("{}/_faults/{id}", self.endpoint))
            .call()
            .expect("the rule is listed")
            .into_json()
            .expect("the router answers JSON");
        rule["hits"].as_u64().unwrap_or_default()
    }

    /// Removes rule `id` (a blackhole's held requests go on).
    pub fn remove(&mut self, id: &str) {
        let _ = ureq::delete(&format!("{}/_faults/{id}", self.endpoint)).call();
        self.ids.retain(|kept| kept != id);
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        for id in std::mem::take(&mut self.ids) {
            let _ = ureq::delete(&format!("{}/_faults/{id}", self.endpoint)).call();
        }
    }
}
