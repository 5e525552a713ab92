"""Make a payment through `once` with a client generated from its API document.

The client package `once_client` is generated, not committed: from the
document a node serves (docs/api.md, "Call it from your language", or
tests/clients/run.sh, which CI runs against a real `once up`):

    openapi-python-client generate --url "$NODE/openapi.json" \
        --output-path generated/once_client --meta none
    PYTHONPATH=generated ONCE_URL=http://127.0.0.1:8080 ONCE_API_KEY=sk_... \
        python pay.py

What it shows, in the order a payment API is used:

1. one `Idempotency-Key` for the operation, reused by every retry: after a
   connection error or a timeout (the answer may have been lost, the payment
   may have been made), after `429`/`503` and `409 IDEMPOTENCY_REQUEST_IN_PROGRESS`
   (waiting `Retry-After`), after `202` (the outcome is being recovered);
2. a retry of a finished operation is its stored answer, replayed
   (`Idempotent-Replayed: true`, the same bytes);
3. the same key with another body is refused (`409`), in the error model;
4. the payment read back by id, and listed by its merchant reference.

The key is sent as the IETF draft's Structured Field string (`"…"`); the
bare form names the same key.

Exits non-zero, with what went wrong, when any answer is not the one the
contract states.
"""

from __future__ import annotations

import os
import random
import sys
import time
import uuid
from typing import Callable, TypeVar

import httpx

from once_client import AuthenticatedClient
from once_client.api.payments import create_payment, get_payment, list_payments
from once_client.models import (
    Channel,
    ErrorBody,
    ErrorCode,
    PaymentListV2,
    PaymentRequest,
    PaymentStatus,
    PaymentV1,
    PaymentV2,
    PendingBody,
)
from once_client.types import Response

T = TypeVar("T")

# Refusals after which the same request, with the same key, may succeed:
# nothing was done, or what was done is recorded under the key.
RETRIED = {
    ErrorCode.IDEMPOTENCY_REQUEST_IN_PROGRESS,  # 409: the first attempt is running
    ErrorCode.RATE_LIMITED,  # 429
    ErrorCode.SERVICE_OVERLOADED,  # 503, shed before any work
    ErrorCode.SERVICE_UNAVAILABLE,  # 503
    ErrorCode.INTERNAL_ERROR,  # 500: the key makes the retry safe
    ErrorCode.REQUEST_TIMEOUT,  # 408: the body did not arrive
    ErrorCode.MISDIRECTED_REQUEST,  # 421: the tenant moved; nothing was written
}
MAX_ATTEMPTS = 8


class Refused(Exception):
    """An answer the contract does not allow here, or a final refusal."""


def structured_string(key: str) -> str:
    """`key` as an RFC 8941 sf-string, the draft's `Idempotency-Key` form."""
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def backoff(attempt: int) -> float:
    """Exponential, capped, with full jitter: retries spread out."""
    return random.uniform(0, min(5.0, 0.2 * 2**attempt))


def retry_after(response: Response) -> float | None:
    value = response.headers.get("retry-after")
    return float(value) if value and value.isdigit() else None


def with_retries(what: str, call: Callable[[], Response[T]]) -> Response[T]:
    """`call` until its answer is final; each attempt printed."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            response = call()
        except httpx.TimeoutException:
            print(f"{what}: attempt {attempt}: timed out; retrying with the same key")
            time.sleep(backoff(attempt))
            continue
        except httpx.TransportError as error:
            print(f"{what}: attempt {attempt}: connection error ({error!r}); retrying")
            time.sleep(backoff(attempt))
            continue
        parsed = response.parsed
        replayed = response.headers.get("idempotent-replayed") == "true"
        if isinstance(parsed, PendingBody):
            wait = retry_after(response) or backoff(attempt)
            print(f"{what}: attempt {attempt}: 202 {parsed.status.value}; retrying after {wait:g} s")
            time.sleep(wait)
            continue
        if isinstance(parsed, ErrorBody) and parsed.error_code in RETRIED:
            wait = retry_after(response) or backoff(attempt)
            print(
                f"{what}: attempt {attempt}: {response.status_code.value} "
                f"{parsed.error_code.value}; retrying after {wait:g} s"
            )
            time.sleep(wait)
            continue
        print(f"{what}: attempt {attempt}: {response.status_code.value}{' (replayed)' if replayed else ''}")
        return response
    raise Refused(f"{what}: no final answer after {MAX_ATTEMPTS} attempts")


def expect_payment(response: Response, status: int) -> PaymentV2 | PaymentV1:
    parsed = response.parsed
    if response.status_code.value != status or not isinstance(parsed, (PaymentV2, PaymentV1)):
        raise Refused(f"expected {status} and a payment, got {response.status_code.value}: {response.content!r}")
    return parsed


def main() -> int:
    base_url = os.environ["ONCE_URL"]
    timeout = float(os.environ.get("ONCE_TIMEOUT_SECONDS", "10"))
    client = AuthenticatedClient(
        base_url=base_url,
        token=os.environ["ONCE_API_KEY"],
        timeout=httpx.Timeout(timeout),
        raise_on_unexpected_status=True,
    )
    key = str(uuid.uuid4())
    reference = f"example-python-{key}"
    request = PaymentRequest(
        account_id="acc_example",
        amount="10.00",
        currency="EUR",
        merchant_reference=reference,
        channel=Channel.WEB,
    )
    header = structured_string(key)

    def create(body: PaymentRequest = request) -> Response:
        return create_payment.sync_detailed(client=client, body=body, idempotency_key=header)

    with client:
        created = with_retries("create", create)
        payment = expect_payment(created, 201)
        print(f"payment {payment.id}: {payment.status.value}")
        if payment.status != PaymentStatus.SUCCEEDED:
            raise Refused(f"the simulator approves acc_example, got {payment.status.value}")

        # The answer could have been lost on its way: the same request, the
        # same key, gets the stored answer, byte for byte.
        again = with_retries("create again", create)
        if again.headers.get("idempotent-replayed") != "true" or again.content != created.content:
            raise Refused(f"a retry of a finished payment is its replay, byte for byte: {again.content!r}")
        if expect_payment(again, 201).id != payment.id:
            raise Refused("the replay names another payment")

        # The same key for another request: refused, nothing charged.
        other = PaymentRequest(
            account_id="acc_example", amount="10.01", currency="EUR", merchant_reference=reference
        )
        mismatch = create(other)
        if not (
            mismatch.status_code.value == 409
            and isinstance(mismatch.parsed, ErrorBody)
            and mismatch.parsed.error_code == ErrorCode.IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST
        ):
            raise Refused(f"another body under the key must be 409, got {mismatch.content!r}")
        print(f"another body under the key: 409 {mismatch.parsed.error_code.value}")

        read = expect_payment(
            with_retries("read", lambda: get_payment.sync_detailed(client=client, id=payment.id)), 200
        )
        if (read.id, read.merchant_reference) != (payment.id, reference):
            raise Refused(f"read back another payment: {read!r}")

        listed = with_retries(
            "list", lambda: list_payments.sync_detailed(client=client, merchant_reference=reference)
        )
        page = listed.parsed
        ids = [p.id for p in page.data] if isinstance(page, PaymentListV2) else None
        if listed.status_code.value != 200 or ids != [payment.id]:
            raise Refused(f"listing by merchantReference: expected [{payment.id}], got {listed.content!r}")
        print(f"read back and listed by merchantReference: {payment.id}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Refused as refused:
        print(f"FAILED: {refused}", file=sys.stderr)
        sys.exit(1)
