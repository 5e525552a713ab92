//! Fixtures every suite agrees on: the test tenants' API keys, the admin
//! tokens, a valid payment body.

/// Tenant `acme`, principal `checkout`.
pub const ACME_KEY: &str = "sk_test_acme_checkout_0001";
/// Tenant `acme`, principal `refunds`.
pub const ACME_REFUNDS_KEY: &str = "sk_test_acme_refunds_00001";
/// Tenant `globex`, principal `checkout`.
pub const GLOBEX_KEY: &str = "sk_test_globex_checkout_01";
/// The three keys above as `ONCE_API_KEYS` lists them (`tenant:principal:key`).
pub const API_KEYS: &str = "acme:checkout:sk_test_acme_checkout_0001,acme:refunds:sk_test_acme_refunds_00001,globex:checkout:sk_test_globex_checkout_01";

/// Every test router's admin token.
pub const ROUTER_ADMIN_TOKEN: &str = "router-admin-token-0123456789";
/// Every test raft-store member's admin token.
pub const STORE_ADMIN_TOKEN: &str = "store-admin-token-for-tests";

/// A valid `POST /payments` body in EUR.
pub fn payment_body(account: &str, amount: &str, reference: &str) -> String {
    format!(
        r#"{{"accountId":"{account}","amount":"{amount}","currency":"EUR","merchantReference":"{reference}"}}"#
    )
}
