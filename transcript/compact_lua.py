"""The Lua scripts of hot and cold trees (transcript/compact.py): resolving a message
id through the alias hash or the cold alias index, compaction's step 3, and warming.

Each runs in the scope's slot; its KEYS and ARGV are listed above it.
"""

# Removes one tree's entries from a cold alias index field (shared by the scripts).
_WITHOUT_LUA = """
local function without(packed, tree)
  local kept = {}
  for i = 1, #packed - 4, 5 do
    local entry = string.sub(packed, i, i + 4)
    if string.sub(entry, 2) ~= tree then kept[#kept + 1] = entry end
  end
  return table.concat(kept)
end
"""

# The node (or tree) a message id of the scope is aliased to: {'h', ref} from the alias
# hash (ref '': a message of no conversation), {'c', tree, cold value} from the cold
# alias index (the value only when ARGV[5] is '1'), {} when unknown.
#   KEYS: alias hash, cold alias index.
#   ARGV: message id, its index field ('': not an integer), its low byte, cold key
#         prefix, '1' to read the cold value.
RESOLVE_LUA = """
local ref = redis.call('HGET', KEYS[1], ARGV[1])
if ref then return {'h', ref} end
if ARGV[2] == '' then return {} end
local packed = redis.call('HGET', KEYS[2], ARGV[2])
if not packed then return {} end
local low = tonumber(ARGV[3])
for i = 1, #packed - 4, 5 do
  if string.byte(packed, i) == low then
    local a, b, c, d = string.byte(packed, i + 1, i + 4)
    local tree = ((a * 256 + b) * 256 + c) * 256 + d
    if ARGV[5] == '1' then return {'c', tree, redis.call('GET', ARGV[4] .. tree)} end
    return {'c', tree}
  end
end
return {}
"""

# Compaction's step 3 (see the module docstring): {outcome, the tree's 'w'}; 'was':
# cold already (a step 3 run again).
#   KEYS: tree hash, cold key, alias hash, cold alias index, companion hashes...
#   ARGV: 1 seconds a tree stays hot after its last write, 2 its field count as read,
#         3 its 'w' as read, 4 the length of its 'C' as read, 5 the cold value, 6 the
#         tree id (4 bytes), 7 n, the n alias fields, then n, n pairs (index field,
#         entries)
COMPACT_LUA = (
    _WITHOUT_LUA
    + """
if redis.call('EXISTS', KEYS[2]) == 1 then return {'was', ''} end
if redis.call('EXISTS', KEYS[1]) == 0 then return {'gone', ''} end
local w = redis.call('HGET', KEYS[1], 'w') or ''
local now = tonumber(redis.call('TIME')[1])
if w ~= '' and tonumber(w) > now - tonumber(ARGV[1]) then return {'fresh', w} end
if w ~= ARGV[3] or redis.call('HLEN', KEYS[1]) ~= tonumber(ARGV[2])
    or redis.call('HSTRLEN', KEYS[1], 'C') ~= tonumber(ARGV[4]) then
  return {'changed', w}
end
local running = redis.call('HGET', KEYS[1], 'R')
if running then
  local prefix = string.sub(KEYS[1], 1, string.find(KEYS[1], '}:', 1, true) + 1)
  for name in string.gmatch(running, '[^,]+') do
    if redis.call('EXISTS', prefix .. name) == 1 then return {'busy', w} end
  end
end
redis.call('SET', KEYS[2], ARGV[5])
redis.call('DEL', KEYS[1])
local at = 7
local n = tonumber(ARGV[at])
for i = at + 1, at + n do redis.call('HDEL', KEYS[3], ARGV[i]) end
at = at + n + 1
n = tonumber(ARGV[at])
for i = at + 1, at + 2 * n, 2 do
  local kept = without(redis.call('HGET', KEYS[4], ARGV[i]) or '', ARGV[6])
  redis.call('HSET', KEYS[4], ARGV[i], kept .. ARGV[i + 1])
end
for k = 5, #KEYS do redis.call('DEL', KEYS[k]) end
return {'cold', ''}
"""
)

# Warms a cold tree: restores its hash (stamped 'w' now), its aliases, its companions
# (unless expired), takes its entries out of the cold alias index and removes the
# value; 'warm', or 'hot' / 'gone' / 'changed' (the value is not the one decoded).
#   KEYS: tree hash, cold key, alias hash, cold alias index, companion hashes...
#   ARGV: 1 SHA-1 of the value as decoded, 2 tree id (4 bytes), 3 now (unix ms), then
#         n, (field, value)*; n, (message id, ref)*; n, index field*; for each companion
#         hash: expires ms (0: never), n, (field, value)*
WARM_LUA = (
    _WITHOUT_LUA
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return 'hot' end
local value = redis.call('GET', KEYS[2])
if not value then return 'gone' end
if redis.sha1hex(value) ~= ARGV[1] then return 'changed' end
local at = 4
local n = tonumber(ARGV[at])
for i = at + 1, at + 2 * n, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'w', redis.call('TIME')[1])
at = at + 2 * n + 1
n = tonumber(ARGV[at])
for i = at + 1, at + 2 * n, 2 do redis.call('HSETNX', KEYS[3], ARGV[i], ARGV[i + 1]) end
at = at + 2 * n + 1
n = tonumber(ARGV[at])
for i = at + 1, at + n do
  local kept = without(redis.call('HGET', KEYS[4], ARGV[i]) or '', ARGV[2])
  if kept == '' then
    redis.call('HDEL', KEYS[4], ARGV[i])
  else
    redis.call('HSET', KEYS[4], ARGV[i], kept)
  end
end
at = at + n + 1
local now = tonumber(ARGV[3])
for k = 5, #KEYS do
  local expires = tonumber(ARGV[at])
  n = tonumber(ARGV[at + 1])
  if expires == 0 or expires > now then
    for i = at + 2, at + 1 + 2 * n, 2 do redis.call('HSETNX', KEYS[k], ARGV[i], ARGV[i + 1]) end
    local left = redis.call('PTTL', KEYS[k])
    if expires > 0 and (left < 0 or left < expires - now) then
      redis.call('PEXPIREAT', KEYS[k], expires)
    end
  end
  at = at + 2 + 2 * n
end
redis.call('DEL', KEYS[2])
return 'warm'
"""
)
