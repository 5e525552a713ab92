//! Loading the API keys, the same way for every role that checks them
//! (node, router): plaintext `ONCE_API_KEYS` for development, merged with
//! a hashed key file for production.

use std::path::Path;

use once_node::ApiKeys;

pub fn load(api_keys_file: Option<&Path>) -> anyhow::Result<ApiKeys> {
    let mut keys = match std::env::var("ONCE_API_KEYS") {
        Ok(list) => ApiKeys::from_plaintext_list(&list)?,
        Err(_) => ApiKeys::default(),
    };
    if let Some(path) = api_keys_file {
        keys = keys.merge(ApiKeys::from_hashed_file(path)?)?;
    }
    anyhow::ensure!(
        !keys.is_empty(),
        "no API keys: set ONCE_API_KEYS or --api-keys-file"
    );
    Ok(keys)
}
