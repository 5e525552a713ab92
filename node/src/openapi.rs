//! The OpenAPI document served at `/openapi.json`, generated from the
//! handlers' annotations so it cannot drift from the code.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::error::{ErrorBody, ErrorCode};
use crate::payments::command::PaymentRequest;
use crate::payments::response::{AmountV2, PaymentV1, PaymentV2, PendingBody};

#[derive(OpenApi)]
#[openapi(
    info(title = "once", description = "Exactly-once payments API. Every error is `{errorCode, message}` with a stable code; see docs/api.md."),
    paths(crate::routes::create, crate::routes::fetch, crate::lookups::list),
    components(schemas(PaymentRequest, PaymentV1, PaymentV2, AmountV2, PendingBody, ErrorBody, ErrorCode)),
    modifiers(&BearerAuth),
    tags((name = "payments", description = "Create and read payments"))
)]
#[derive(Debug)]
pub struct ApiDoc;

#[derive(Debug)]
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}
