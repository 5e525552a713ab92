//! `get_payment`: a read, retried on the same statuses as a create (a read
//! changes nothing, so any retry is safe).

use reqwest::Method;

use crate::attempt::{Answer, Request};
use crate::client::Client;
use crate::error::GetPaymentError;
use crate::payments::payment::Payment;
use crate::retry::{self, Verdict};
use crate::trace::TraceParent;

impl Client {
    /// Reads a payment of this API key's tenant, rendered in the current
    /// schema. Another tenant's payment is [`GetPaymentError::NotFound`].
    pub async fn get_payment(&self, id: &str) -> Result<Payment, GetPaymentError> {
        let mut url = self.config().base_url.clone();
        // Pushed as one segment: an id with `/` or `..` stays inside it.
        url.path_segments_mut()
            .expect("the base URL is checked to be a base")
            .pop_if_empty()
            .extend(["payments", id]);
        let request = Request {
            operation: "get_payment",
            method: Method::GET,
            url,
            idempotency_key: None,
            body: None,
            trace: TraceParent::generate(),
            until: None,
        };
        let ended = retry::until_final(self, &request, judge).await;
        match ended.result {
            Ok(result) => result,
            Err(last_error) => Err(GetPaymentError::Indeterminate { last_error }),
        }
    }
}

fn judge(answer: &Answer) -> Verdict<Result<Payment, GetPaymentError>> {
    match answer.status {
        200 => Verdict::Final(serde_json::from_slice(&answer.body).map_err(|e| {
            GetPaymentError::Unexpected {
                status: 200,
                code: None,
                message: format!("the payment did not parse: {e}"),
            }
        })),
        404 if answer.said().error_code.as_deref() == Some("PAYMENT_NOT_FOUND") => {
            Verdict::Final(Err(GetPaymentError::NotFound))
        }
        401 => Verdict::Final(Err(GetPaymentError::Unauthorized {
            message: answer.message(),
        })),
        status if retry::retryable_status(status) => Verdict::Retry(retry::retryable(answer)),
        status => Verdict::Final(Err(GetPaymentError::Unexpected {
            status,
            code: answer.said().error_code,
            message: answer.message(),
        })),
    }
}
