"""
Notifications: each event a webhook subscribes to, POSTed as JSON, as Argo Rollouts'
notifications map triggers (``on-rollout-completed``, ``-aborted``, ...) to webhooks.

An inventory's ``notify_webhooks`` lists ``{"url": ..., "reasons": [...]}``. A URL
that needs a secret (a token in its path, as Slack's have) holds the placeholder
``{token}``; the value comes from ``SGLFLEET_WEBHOOK_TOKEN`` in the controller's
environment or the first targeted host's ``secrets_file`` that holds it, found and checked as the other secrets are
(``sglfleet.plan.secrets``: a file only its owner reads, outside the repository), so it is never in
an inventory, a diff, a log or an event. A POST has a timeout and a bounded retry;
a webhook that fails raises, and the event log records ``WebhookFailed``.

**Example:**

.. code:: python

    hook = Webhook.from_config({"url": "https://hooks.example/T/{token}", "reasons": ["RunFinished"]},
                               ["~/.config/sglfleet/secrets.env"])
    hook.send({"reason": "RunFinished", ...})
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from sglfleet.plan.secrets import controller_secret

TOKEN = "SGLFLEET_WEBHOOK_TOKEN"
PLACEHOLDER = "{token}"
TIMEOUT_S = 5.0
ATTEMPTS = 3     # one try and two retries, 1 s then 2 s apart
BACKOFF_S = 1.0


class WebhookError(Exception):
    """A webhook that could not be delivered; the message never holds its secret."""


@dataclass(frozen=True)
class Webhook:
    """
    One subscription: where to POST, which reasons, and the secret its URL needs.

    + url: the URL as the inventory gives it (``{token}`` where the secret goes)
    + reasons: the event reasons it gets (``sglfleet.events.REASONS``)
    + secret: the token's value, or None
    """

    url: str
    reasons: tuple[str, ...]
    secret: str | None = None

    @classmethod
    def from_config(cls, entry: dict, secrets_files: Sequence[str | None]) -> "Webhook":
        """
        The webhook of an inventory's ``notify_webhooks`` entry, with its token where its URL needs one.

        + secrets_files: the targeted hosts' ``secrets_file``s, in inventory order: the token is the
          environment's, else the first file's that holds it. A file others can read raises ``SecretsError``
        """
        if PLACEHOLDER not in entry["url"]:
            return cls(entry["url"], tuple(entry["reasons"]))
        found = (controller_secret(TOKEN, path) for path in dict.fromkeys(secrets_files or (None,)))
        return cls(entry["url"], tuple(entry["reasons"]), next((secret for secret in found if secret), None))

    def send(self, event: dict, sleep=time.sleep) -> None:
        """POST ``event`` if this webhook subscribes to its reason; raise ``WebhookError`` after the last try."""
        if event["reason"] not in self.reasons:
            return
        if PLACEHOLDER in self.url and not self.secret:
            raise WebhookError(f"{self.url}: needs {TOKEN} (environment or secrets_file); not sent")
        request = urllib.request.Request(
            self.url.replace(PLACEHOLDER, self.secret or ""), data=json.dumps(event).encode(),
            headers={"Content-Type": "application/json", "User-Agent": "sglfleet"}, method="POST")
        last = ""
        for attempt in range(ATTEMPTS):
            if attempt:
                sleep(BACKOFF_S * 2 ** (attempt - 1))
            try:
                with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                    if 200 <= response.status < 300:
                        return
                    last = f"answered {response.status}"
            except urllib.error.HTTPError as error:
                last = f"answered {error.code}"
                if 400 <= error.code < 500 and error.code != 429:
                    break  # the request is wrong: trying again changes nothing
            except (OSError, ValueError) as error:
                last = type(error).__name__ + (f": {error.reason}" if hasattr(error, "reason") else "")
        raise WebhookError(f"{self.url}: {last} after {attempt + 1} tries")
