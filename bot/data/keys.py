"""Every Redis key shape of the bot itself, in one place.

The transcript store's keys (trees, aliases) are in :mod:`transcript.keys`;
these are the bot's message bus, turn state and token accounting. Keys of one
chat carry the store's hash tag ``{chat}`` (:func:`transcript.keys.scope_prefix`),
so a turn's state lives in the same Redis Cluster slot as its transcript.

The layout itself (bot/data/layout.py):

    rc:layout          the version of this key layout, LAYOUT_VERSION ("3"): set by
                         the first bot to start on a Redis (SET NX); a bot or an
                         operator command refuses a Redis holding another version

The message bus:

    rc:intake          stream of accepted user messages, consumer group "turns";
                         with INTAKE_SHARDS=N > 1 also rc:intake:1 .. rc:intake:<N-1>
                         (no hash tag: each its own slot), a chat's messages in
                         shard crc32(chat id) % N
    rc:deadletter      stream of turns given up after TURN_MAX_ATTEMPTS unexpected
                         failures (the entry, the error's type; for the operator)
    rc:relay           stream every process reads from its end (capped near 1,000
                         entries; bot/bus/relay.py): stop buttons pressed under
                         answers another process may write (chat, draft id) and
                         Telegram flood windows (chat, seconds; a starting process
                         reads back those still open)
    rc:poller          the BOT_INSTANCE that polls Telegram (a lease, SET PX,
                         renewed while it polls; bot/data/lease.py)
    rc:cold-sweep      the BOT_INSTANCE that compacts trees at rest (a lease like the
                         poller's; bot/data/sweep.py). The store's cold keys, the index of
                         hot trees it reads, are in transcript/keys.py

The turn (bot/turn/state.py):

    rc:{S}:turn:<m>    hash: the state of the turn answering message m (an edit of m
                         to a new wording is turn "<m>:e<digest of the wording>")
                         r, u, a  root, user and answer node refs (each written by
                                  the store's append in the same atomic step)
                         p        answer parts Telegram accepted, comma-separated
                         c        model calls started
                         t<k>     ref of tool round k's step node (the store's append)
                         q        msgpack [k, message]: tool round k's calls, noted
                                  before they run
                         q<k>.<i> msgpack message: the result of call i of round k
                         x        unexpected failures
                         o        the topic a new conversation outside topics opened
                                  in a private chat (its message_thread_id; 0: none
                                  could be, it is answered in place), noted right
                                  after createForumTopic (TOPIC_THREADS)
                       A finished turn's hash is deleted: its nodes and parts are found
                       through their aliases, and its mark is in a done set:
    rc:{S}:done:<day>  set of the ids m of the chat's messages whose turns finished on
                         that UTC day (an intset: a few bytes a turn); an edit's turn id
                         goes to rc:{S}:done:<day>:e. Each expires DONE_TTL_SECONDS + 1
                         day after its last write; a turn is found done while the set
                         of its day, the day before or the day before that exists, so
                         for at least two days (Telegram keeps an update one day)
    rc:{S}:lease:<m>   the worker running that turn (SET NX PX)
    rc:{S}:part        hash, the chat's part ledger: "<part id>" -> turn id (a part
                         sent by a turn still running); "~<turn id>" -> the number
                         of the part that turn is about to send (announced before
                         the send, replaced by the part's id once Telegram named
                         it). A reply to a bot message not yet aliased finds it here
    rc:{S}:orphans     hash: message m -> "low:high:node ref:part:depth": part number
                         `part` of m's answer (at `depth`) may be on screen under an
                         id in (low, high) that was never recorded (a crash between
                         sending and recording it); a reply to such a bot message
                         whose text can be that part (its [depth:N] tag) is adopted
                         into m's thread (an entry of three fields, written before
                         part and depth were kept, adopts without that check)

Private-chat topics (bot/turn/topics.py):

    rc:{S}:topics      hash: topic (message_thread_id) -> "implicit": a topic of a
                         private chat whose name Telegram made up, waiting for its
                         title (the field is taken, HDEL, by the turn that titles it)
    rc:{S}:heads       hash: topic -> the node ref its next message replying to nothing
                         continues from (TOPIC_THREADS): where a reply to the bot's
                         newest message in the topic goes on (its newest answer), set by
                         the final write of each of its turns (removed by one whose
                         message continues nothing)
    rc:{S}:queue:<t>   sorted set: the turns of topic t taken in and not finished (turn
                         id, scored by its message id): added by the intake's append (or
                         by the turn that opened the topic), removed by the turn's end;
                         a turn of the topic waits for those before it, so the topic's
                         messages are answered in order (TOPIC_THREADS). Expires two
                         days after its last addition

Models and personas (bot/turn/branch.py; the choices made at nodes are the tree's
choice index, :mod:`transcript.keys`; a persona's text is a blob of the chat):

    rc:{S}:prefs       hash: "m<user>" -> the catalogue model, "p<user>" -> the persona
                         of that user's new conversations in the chat ("" or absent:
                         the catalogue's default); read with each turn's claim
    rc:spend-alert:<day>  the day's spend alert was sent (SET NX; expires after two
                         days)

A user's own settings, the same in every chat (bot/data/userprefs.py):

    rc:{user:<k>}:prefs    hash "f<user>" -> "rich" | "plain": how that user's answers
                             look (/format; absent: RICH_MESSAGES decides). Users are
                             spread over USAGE_BUCKETS buckets as the usage totals are
                             (k = crc32(user id) % USAGE_BUCKETS); read with each turn's
                             claim

Media (bot/model/vision.py; image bytes are the transcript store's blobs):

    rc:{S}:unheard:<m> a voice message m that could not be transcribed (its intake
                         entry); a reply to m tries again. Expires after a week.
    rc:{S}:album:<g>   hash of album g (media_group_id): "<m>" -> the photo's intake
                         entry (noted before it enters the intake), "lead" -> the
                         message whose turn answers the album, "got" -> the ids it
                         gathered (fixed once). Expires after two days.
    rc:text-only       set of model names that rejected image parts (they get a
                         placeholder text instead of each image from then on)
    rc:{S}:unread      hash: image digest -> the model that could not read that image
                         of the chat (a 400 naming it: format, size, content); that
                         model gets a placeholder text instead of it from then on (the
                         blob stays). Written with the turn's call count ("c") in one
                         transaction: both are in the chat's slot.

Token accounting (bot/usage/accounting.py). Fields p/c/k/n/e/x: prompt, completion,
cached tokens, calls, estimated calls, failed calls; d: the cost in nano-dollars (the
totals only); a zero field is absent. With several catalogue models the totals also
hold "p:<model>", "c:<model>", "k:<model>", "n:<model>" and "d:<model>". A call's
detail lives in its chat's slot (the chat's hash tag, beside its transcript); the
totals per user and per day live in USAGE_BUCKETS buckets, the bucket of a user being
crc32(user id) % USAGE_BUCKETS, so no slot takes every call's write:

    rc:{S}:u:t:<day>        hash "<m>" -> "p c k n e x": per turn (the user's message
                              id m), for the per-turn token guard ("e x" left out
                              while both are 0); expires ``detail_days`` after the
                              day's first call
    rc:{S}:u:n:<tree>       hash "<node ref>" -> "p c k n markers view": the calls sent
                              up to that node, per conversation tree (/usage of a
                              branch sums a path; the context window sizes the next
                              request from the previous one); markers are "#" and 8
                              characters of a digest of each counted call's id (a
                              repeated record is a no-op); expires ``detail_days``
                              after the tree's last call (compacted with a cold
                              tree, bot/data/sweep.py, and restored when it warms)
    rc:{S}:u:a:<day>        hash "<marker>" -> audit record of one call of that day (a
                              msgpack array in the order of :data:`AUDIT_FIELDS`,
                              without what the key tells: "sent" is a node ref
                              without the chat, "user" nil when it is the chat); the
                              hash expires ``audit_days`` + 1 day after its first call
    rc:{S}:u:p              hash "<marker>" -> "user day p c k e x d model at" (model
                              "-": not counted per model): calls counted
                              in the chat's detail whose user and day totals are not
                              yet known written; removed by the turn's final write (or
                              the chat's next record), so usually absent
    rc:{usage:<k>}:u:<user>        per user, all time (/usage, /stats)
    rc:{usage:<k>}:u:<user>:<day>  per user and UTC day (daily limit, /usage); 400 days
    rc:{usage:<k>}:d:<day>         this bucket's share of a UTC day (/stats sums the
                                     buckets)
    rc:{usage:<k>}:users           zset: tokens per user of this bucket (the top users
                                     of /stats merge the buckets)
    rc:{usage:<k>}:counted:<day>   set of the markers' 48 bits as numbers (an intset,
                                     8 bytes a call): calls whose totals are written
                                     (the second step is a no-op when repeated);
                                     expires after two days

Payments (bot/payments/: Telegram Stars buy credit, in nano-dollars). A user's payments
and credit live in the user's totals bucket, beside the day totals their spend is drawn
from, so crediting a payment, a refund's step and settling a day's spend are each one
script in one slot. A payment is found by its charge id alone by reading the 16 buckets'
records (one pipelined read). Nothing here expires: payments outlive everything.

    rc:{usage:<k>}:pay             hash "<telegram_payment_charge_id>" -> "user stars
                                     credit at": the payment (credit in nano-dollars
                                     added, at in unix seconds); written once (HSETNX),
                                     never changed: the credit is added only by the
                                     script call that wrote it
    rc:{usage:<k>}:refund          hash "<charge id>" -> "at taken forced": the refund of
                                     that payment (taken: nano-dollars taken from the
                                     credit; forced 1: the credit was spent, refunded
                                     all the same), written once; "?<charge id>" -> at:
                                     a refund begun (Telegram may have refunded the
                                     Stars), removed by the script that writes the refund
    rc:{usage:<k>}:credit:<user>   hash of a user's credit: b (the balance, never below
                                     0), in (credited), back (taken by refunds), used
                                     (drawn by spend), lost (spend past the credit,
                                     written off); b = in - back - used. w: "<day>:<n>
                                     ..." the spend of today and yesterday over the
                                     free allowance already drawn (n nano-dollars), so
                                     settling a day again draws nothing twice
    rc:{usage:<k>}:pays:<user>     list of the user's charge ids, newest first
    rc:{usage:<k>}:pays            list of the bucket's charge ids, newest first
    rc:{usage:<k>}:stars           hash: in (Stars credited), n (payments), out (Stars
                                     refunded), r (refunds): /stats sums the buckets
"""

from __future__ import annotations

import zlib

from transcript.keys import NAMESPACE, scope_prefix

INTAKE_STREAM = f"{NAMESPACE}:intake"
INTAKE_GROUP = "turns"
DEAD_LETTER_STREAM = f"{NAMESPACE}:deadletter"
#: Stops and flood windows every process hears of (bot/bus/relay.py).
RELAY_STREAM = f"{NAMESPACE}:relay"
TEXT_ONLY_MODELS = f"{NAMESPACE}:text-only"

#: The key holding the version of the key layout a Redis holds (bot/data/layout.py).
LAYOUT_KEY = f"{NAMESPACE}:layout"
#: The version of the key layout this module describes: every key shape above, the
#: transcript store's (:mod:`transcript.keys`) and what each holds. A change that an
#: older bot would misread takes the next number. 2: an intake entry (also kept for
#: an album or an unheard voice note) carries its sender's language_code, a field
#: bots of layout 1 reject, as this one rejects their entries. 3: cold trees
#: (transcript/cold.py), which a bot of layout 2 would take for missing threads; a
#: layout-2 Redis holds none, so this bot reads it as it is and marks it 3 at start.
LAYOUT_VERSION = "3"
#: Older layouts this bot reads as they are (and marks as its own when it starts).
UPGRADED_LAYOUTS = frozenset({"2"})


def intake_stream(shard: int) -> str:
    """Intake stream number ``shard`` (INTAKE_SHARDS of them; shard 0 is ``rc:intake``)."""
    return INTAKE_STREAM if shard == 0 else f"{INTAKE_STREAM}:{shard}"


def intake_shard(chat_id: int, shards: int) -> int:
    """The intake shard of a chat: a hash of its id, so a chat's messages share a stream."""
    return zlib.crc32(str(chat_id).encode()) % shards if shards > 1 else 0


POLLER_LEASE = f"{NAMESPACE}:poller"
SWEEP_LEASE = f"{NAMESPACE}:cold-sweep"


def tree_companions(tree: int) -> list[str]:
    """The chat keys that belong to one conversation tree (without the chat's prefix):
    compacted with it when it goes cold (its usage per node, ``rc:{S}:u:n:<tree>``)."""
    return [f"u:n:{tree}"]


def turn_key(scope: str, turn: int | str) -> str:
    return f"{scope_prefix(scope)}turn:{turn}"


def lease_key(scope: str, turn: int | str) -> str:
    return f"{scope_prefix(scope)}lease:{turn}"


def done_key(scope: str, day: str, turn: int | str) -> str:
    """The set of the chat's turns finished on UTC ``day`` that holds ``turn``'s mark.

    A message's turn id is its message id: those share one set, kept an intset (a few
    bytes a turn); an edit's turn ("<m>:e<digest>") goes to the day's edits set, so one
    edit does not turn the chat's set of numbers into a table of strings.
    """
    suffix = "" if str(turn).isdigit() else ":e"
    return f"{scope_prefix(scope)}done:{day}{suffix}"


def pending_parts_key(scope: str) -> str:
    return scope_prefix(scope) + "part"


def orphans_key(scope: str) -> str:
    return scope_prefix(scope) + "orphans"


def topics_key(scope: str) -> str:
    return scope_prefix(scope) + "topics"


def topic_heads_key(scope: str) -> str:
    return scope_prefix(scope) + "heads"


def topic_queue_key(scope: str, topic: int) -> str:
    return f"{scope_prefix(scope)}queue:{topic}"


def album_key(scope: str, group: str) -> str:
    return f"{scope_prefix(scope)}album:{group}"


def unheard_key(scope: str, message_id: int) -> str:
    return f"{scope_prefix(scope)}unheard:{message_id}"


def unread_key(scope: str) -> str:
    return scope_prefix(scope) + "unread"


def prefs_key(scope: str) -> str:
    return scope_prefix(scope) + "prefs"


def spend_alert_key(day: str) -> str:
    return f"{NAMESPACE}:spend-alert:{day}"


#: Buckets of the per-user and per-day usage totals. Fixed: a user's bucket follows
#: from it, so changing it would hide the totals already written.
USAGE_BUCKETS = 16


def usage_bucket(user_id: int) -> int:
    """The bucket holding a user's totals."""
    return zlib.crc32(str(user_id).encode()) % USAGE_BUCKETS


def usage_total_key(bucket: int, *parts: object) -> str:
    """A key of one totals bucket, e.g. ``usage_total_key(3, "u", user, day)``."""
    return ":".join([f"{NAMESPACE}:{{usage:{bucket}}}", *map(str, parts)])


def chat_usage_key(chat: int | str, *parts: object) -> str:
    """A usage detail key in the chat's slot, e.g. ``chat_usage_key(chat, "t", day)``;
    ``chat`` is its id or its scope (a guest chat's "g<chat>": its own detail)."""
    return scope_prefix(str(chat)) + ":".join(["u", *map(str, parts)])


def user_prefs_key(user_id: int) -> str:
    """The hash holding a user's own settings (one per bucket of users)."""
    return f"{NAMESPACE}:{{user:{usage_bucket(user_id)}}}:prefs"


def payments_key(bucket: int) -> str:
    """The payment records of a bucket (charge id -> "user stars credit at")."""
    return usage_total_key(bucket, "pay")


def refunds_key(bucket: int) -> str:
    """The refund records (and refunds begun) of a bucket's payments."""
    return usage_total_key(bucket, "refund")


def credit_key(user_id: int) -> str:
    """A user's credit hash (in the user's bucket)."""
    return usage_total_key(usage_bucket(user_id), "credit", user_id)


def user_payments_key(user_id: int) -> str:
    """A user's charge ids, newest first."""
    return usage_total_key(usage_bucket(user_id), "pays", user_id)


def bucket_payments_key(bucket: int) -> str:
    """A bucket's charge ids, newest first."""
    return usage_total_key(bucket, "pays")


def stars_key(bucket: int) -> str:
    """A bucket's Stars received and refunded."""
    return usage_total_key(bucket, "stars")
