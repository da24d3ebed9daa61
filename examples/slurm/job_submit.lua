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

-- Seconds `carma estimate` may take inside slurmctld's hook: it reads only
-- regular files of bounded size, and is stopped if it ever takes longer.
local ESTIMATE_TIMEOUT_S = 10

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

-- The shards the job needs, or nil and why not.
local function shards_for(rad)
   local carma = find_carma()
   if carma == nil then
      return nil, "carma is not installed (looked for " .. table.concat(CARMA_PATHS, ", ") .. ")"
   end
   local handle = io.popen("timeout " .. ESTIMATE_TIMEOUT_S .. " " .. quote(carma)
      .. " estimate --json " .. quote(rad) .. " 2>/dev/null")
   if handle == nil then
      return nil, "cannot run " .. carma
   end
   local out = handle:read("*a")
   handle:close()
   -- An estimate always says its need; anything else is a failure (Lua
   -- 5.1's close does not give the exit status).
   local need = string.match(out, '"need":%s*"([%w-]+)"')
   if need == nil then
      return nil, "`carma estimate " .. rad .. "` failed (run it to see why)"
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
   local shards, why = shards_for(rad)
   if shards ~= nil then
      job_desc.tres_per_node = "gres:shard:" .. shards
      slurm.log_user("carma: %s asks for %d GPU memory shards", rad, shards)
   else
      slurm.log_user("carma: %s: no GPU memory shards asked for: %s", rad, why)
      slurm.log_error("carma job_submit: %s: %s", rad, why)
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

return slurm.SUCCESS
