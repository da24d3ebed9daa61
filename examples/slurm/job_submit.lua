--[[
Slurm job_submit.lua: fills in GPU memory shards for batch jobs that name
a carma job file, so users may submit with plain sbatch:

    #!/bin/bash
    #CARMA rad=train.rad
    python train.py

The .rad (either syntax; relative to the job's working directory) is
estimated with `carma estimate --json`, as `carma slurm submit` would, and
a job that asked for no GPU resources of its own gets
--gres=shard:ceil((estimate + margin) / shard), or all the shards of one
GPU for a need of a GPU or more. Jobs without the #CARMA line pass
unchanged; so do jobs whose .rad cannot be estimated, or when carma is not
installed, and the submitter and slurmctld's log are told why. Install as job_submit.lua next to
slurm.conf with JobSubmitPlugins=lua; keep SHARD_MIB, SHARDS_PER_GPU and
MARGIN_MIB equal to carma's [slurm] shard_mib, shards_per_gpu and
[placement] margin_mib. carma slurm submit does all of this itself and
also recovers OOM crashes; this hook only sizes the request.
]]

-- Where `make install` puts carma (PREFIX=/usr/local), then a distribution
-- package's place: the first that exists is used.
local CARMA_PATHS = { "/usr/local/bin/carma", "/usr/bin/carma" }
local SHARD_MIB = 1024
local SHARDS_PER_GPU = 40
local MARGIN_MIB = 2048

-- One literal shell word (single quotes, each ' as '\'').
local function quote(word)
   return "'" .. string.gsub(word, "'", "'\\''") .. "'"
end

-- Seconds `carma estimate` may take inside slurmctld's hook, which holds
-- every other submission meanwhile: it reads only regular files of
-- bounded size (in tens of milliseconds), and is killed if it ever takes
-- longer (a path on a file system that does not answer).
local ESTIMATE_TIMEOUT_S = 2

-- Estimates one user may have made in a minute, and seconds all estimates
-- together may take in a minute: past either, jobs pass unchanged (with a
-- message). A user whose estimate ran out of its time (a path on a file
-- system that does not answer) makes no other that minute.
local ESTIMATES_PER_MINUTE = 20
local SECONDS_PER_MINUTE = 10
local estimates = {}
local spent = { minute = -1, seconds = 0 }

local function this_minute()
   local minute = math.floor(os.time() / 60)
   if spent.minute ~= minute then
      spent = { minute = minute, seconds = 0 }
   end
   return minute
end

-- Why `uid` may not have an estimate now, or nil.
local function refused(uid)
   local minute = this_minute()
   local made = estimates[uid]
   if made == nil or made.minute ~= minute then
      made = { minute = minute, count = 0 }
      estimates[uid] = made
   end
   made.count = made.count + 1
   if made.count > ESTIMATES_PER_MINUTE then
      return "more than " .. ESTIMATES_PER_MINUTE .. " estimates asked for within a minute"
   end
   if spent.seconds >= SECONDS_PER_MINUTE then
      return "estimates took " .. SECONDS_PER_MINUTE .. " s within this minute already"
   end
   return nil
end

-- Counts `seconds` an estimate of `uid`'s took.
local function took(uid, seconds)
   this_minute()
   spent.seconds = spent.seconds + seconds
   if seconds >= ESTIMATE_TIMEOUT_S then
      estimates[uid].count = ESTIMATES_PER_MINUTE
   end
end

-- Whether this hook runs as root (SlurmUser=root): then the estimate runs
-- as the submitter, and reads only what they may. Taken as root unless
-- `id -u` says otherwise.
local AS_ROOT = (function()
   local handle = io.popen("/usr/bin/id -u")
   if handle == nil then
      return true
   end
   local uid = tonumber(handle:read("*l"))
   handle:close()
   return uid == nil or uid == 0
end)()

-- A path as it may go into a log line: control characters as `?`, and
-- so are (in UTF-8) the C1 controls (U+0080-U+009F, which terminals act
-- on like escapes) and the characters that reorder or break a line
-- (U+061C, U+200E/F, U+2028/9, U+202A-U+202E, U+2066-U+2069).
local function shown(text)
   local out = string.gsub(text, "%c", "?")
   for _, pattern in ipairs({
      "\194[\128-\159]",
      "\216\156",
      "\226\128[\142\143\168-\174]",
      "\226\129[\166-\169]",
   }) do
      out = string.gsub(out, pattern, "?")
   end
   return out
end

local function find_carma()
   for _, path in ipairs(CARMA_PATHS) do
      local file = io.open(path, "r")
      if file ~= nil then
         file:close()
         return path
      end
   end
   return nil
end

-- The shards the job needs, or nil and why not; `uid` and `gid` are the
-- submitter's.
local function shards_for(rad, uid, gid)
   local carma = find_carma()
   if carma == nil then
      return nil, "carma is not installed (looked for " .. table.concat(CARMA_PATHS, ", ") .. ")"
   end
   if string.sub(rad, -4) ~= ".rad" then
      return nil, "expected a path ending in .rad"
   end
   local why = refused(uid)
   if why ~= nil then
      return nil, why
   end
   local as = ""
   if AS_ROOT and uid ~= 0 then
      as = string.format("/usr/bin/setpriv --reuid=%d --regid=%d --init-groups ", uid, gid)
   end
   -- The deadline is the hook's (timeout runs before the switch to the
   -- submitter, who could stop it otherwise), and carma writes to a file
   -- of the hook's, not to the pipe read here: a process of the
   -- submitter's holding the pipe would hold slurmctld.
   local started = os.time()
   local handle = io.popen("f=$(mktemp) || exit 1; /usr/bin/timeout -k 1 " .. ESTIMATE_TIMEOUT_S
      .. " " .. as .. quote(carma) .. " estimate --json -- " .. quote(rad)
      .. ' > "$f" 2>/dev/null; cat "$f"; rm -f "$f"')
   if handle == nil then
      return nil, "cannot run " .. carma
   end
   local out = handle:read("*a")
   handle:close()
   took(uid, os.time() - started)
   -- An estimate always says its need; anything else is a failure (Lua
   -- 5.1's close does not give the exit status).
   local need = string.match(out, '"need":%s*"([%w-]+)"')
   if need == nil then
      return nil, "`carma estimate " .. shown(rad) .. "` failed (run it to see why)"
   end
   local mib = tonumber(string.match(out, '"mib":%s*(%d+)'))
   if mib == nil then
      return SHARDS_PER_GPU -- a whole GPU, or unknown
   end
   local shards = math.ceil((mib + MARGIN_MIB) / SHARD_MIB)
   if shards < 1 then
      shards = 1
   end
   if shards > SHARDS_PER_GPU then
      shards = SHARDS_PER_GPU
   end
   return shards
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local script = job_desc.script
   if script == nil then
      return slurm.SUCCESS
   end
   local rad = string.match(script, "\n#CARMA%s+rad=([^\n]+)")
   if rad == nil or job_desc.tres_per_node ~= nil then
      return slurm.SUCCESS
   end
   rad = string.gsub(rad, "%s+$", "")
   if string.sub(rad, 1, 1) ~= "/" and job_desc.work_dir ~= nil then
      rad = job_desc.work_dir .. "/" .. rad
   end
   local uid = tonumber(submit_uid)
   if uid == nil then
      return slurm.SUCCESS
   end
   uid = math.floor(uid)
   local gid = math.floor(tonumber(job_desc.group_id) or uid)
   local shards, why = shards_for(rad, uid, gid)
   if shards ~= nil then
      job_desc.tres_per_node = "gres:shard:" .. shards
      slurm.log_user("carma: %s asks for %d GPU memory shards", shown(rad), shards)
   else
      slurm.log_user("carma: %s: no GPU memory shards asked for: %s", shown(rad), why)
      slurm.log_error("carma job_submit: uid %d: %s: %s", uid, shown(rad), why)
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

return slurm.SUCCESS
