// SPDX-License-Identifier: Apache-2.0
/*
 * A script workload on the Lua 5.4 interpreter (its sources, fetched by
 * build beside this file into its cache and compiled at -O2; never
 * committed), embedded: bench/layout_vs_bolt's second real program, an
 * interpreter, whose hot code is luaV_execute's dispatch loop and the
 * runtime it calls (tables, strings, closures, the garbage collector).
 * It speaks bench/replace_sqlite/live_driver.h's protocol (rounds timed
 * inside the process on "run N", --loop, HOTPATH_REPLAY), as SQLite's
 * driver does.
 * Setup loads the script below into one Lua state; each workload pass calls
 * its pass(i), which runs a few classic benchmark kernels written for it,
 * three times with different seeds, and gives an integer folded into the
 * round's checksum:
 *   fib       recursion (calls and returns);
 *   records   table-heavy: records built, sorted by a comparator closure,
 *             grouped into a hash table, summed;
 *   words     string-heavy: formatting, concatenation, gsub with a
 *             function, pattern matching, byte sums;
 *   closures  counters and adders made and called, map/filter/reduce;
 *   vm        a small stack-machine interpreter written in Lua (an
 *             interpreter inside the interpreter) running a loop program;
 *   sieve     primes, integer arithmetic over an array.
 * Nothing depends on the time, a random seed or table iteration order, so
 * every round of every process gives the same checksum.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../replace_sqlite/live_driver.h"
#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

static lua_State *L;

static const char script[] =
	"local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end\n"
	"\n"
	"local function records(seed)\n"
	"  local t = {}\n"
	"  for i = 1, 600 do\n"
	"    local k = (i * 7919 + seed) % 1009\n"
	"    t[i] = { id = i, key = k, name = 'r' .. k, amount = (k % 97) * 3 }\n"
	"  end\n"
	"  table.sort(t, function(a, b) if a.key ~= b.key then return a.key < b.key end return a.id < b.id end)\n"
	"  local groups, sum = {}, 0\n"
	"  for i, r in ipairs(t) do\n"
	"    local g = groups[r.key % 31]\n"
	"    if not g then g = { n = 0, total = 0 }; groups[r.key % 31] = g end\n"
	"    g.n = g.n + 1\n"
	"    g.total = g.total + r.amount\n"
	"    sum = (sum * 31 + r.id * i) % 1000000007\n"
	"  end\n"
	"  for k = 0, 30 do local g = groups[k] if g then sum = (sum + k * g.n + g.total) % 1000000007 end end\n"
	"  return sum\n"
	"end\n"
	"\n"
	"local function words(seed)\n"
	"  local parts = {}\n"
	"  for i = 1, 300 do\n"
	"    parts[#parts + 1] = string.format('%s-%05d:%x', i % 3 == 0 and 'alpha' or 'beta', (i * seed) % 99991, i)\n"
	"  end\n"
	"  local s = table.concat(parts, ' ')\n"
	"  local n = 0\n"
	"  s = s:gsub('(%a+)%-(%d+)', function(w, d) n = n + #w + tonumber(d) % 7 return w:upper() .. d:sub(1, 3) end)\n"
	"  for hex in s:gmatch(':(%x+)') do n = n + tonumber(hex, 16) end\n"
	"  local b = 0\n"
	"  for i = 1, #s, 7 do b = (b * 131 + s:byte(i)) % 1000000007 end\n"
	"  local found = select(2, s:gsub('ALPHA', '')) + (s:find('BETA00', 1, true) or 0)\n"
	"  return (n + b + found + #s:rep(2, ',')) % 1000000007\n"
	"end\n"
	"\n"
	"local function closures(seed)\n"
	"  local function counter(step) local c = 0 return function() c = c + step return c end end\n"
	"  local function adder(x) return function(y) return x + y end end\n"
	"  local function map(t, f) local r = {} for i = 1, #t do r[i] = f(t[i]) end return r end\n"
	"  local function filter(t, f) local r = {} for i = 1, #t do if f(t[i]) then r[#r + 1] = t[i] end end return r end\n"
	"  local function reduce(t, f, a) for i = 1, #t do a = f(a, t[i]) end return a end\n"
	"  local xs, total = {}, 0\n"
	"  for i = 1, 400 do xs[i] = (i * seed) % 1013 end\n"
	"  for k = 1, 6 do\n"
	"    local c, add = counter(k), adder(k * 3)\n"
	"    local ys = filter(map(xs, add), function(v) return v % (k + 1) ~= 0 end)\n"
	"    total = total + reduce(ys, function(a, v) return a + v + c() % 5 end, 0)\n"
	"  end\n"
	"  return total\n"
	"end\n"
	"\n"
	"-- A stack machine: ops are {opcode, argument}; the program sums i * i % 7 for i = 1 .. n.\n"
	"local PUSH, LOAD, STORE, ADD, SUB, MUL, MOD, JZ, JMP, HALT = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10\n"
	"local function vm(n)\n"
	"  local code = {\n"
	"    {PUSH, n}, {STORE, 1}, {PUSH, 0}, {STORE, 2},\n"
	"    {LOAD, 1}, {JZ, 20},\n"
	"    {LOAD, 1}, {LOAD, 1}, {MUL, 0}, {PUSH, 7}, {MOD, 0}, {LOAD, 2}, {ADD, 0}, {STORE, 2},\n"
	"    {LOAD, 1}, {PUSH, 1}, {SUB, 0}, {STORE, 1}, {JMP, 5},\n"
	"    {LOAD, 2}, {HALT, 0},\n"
	"  }\n"
		"  local stack, sp, mem, pc = {}, 0, {}, 1\n"
	"  while true do\n"
	"    local ins = code[pc]\n"
	"    local op, arg = ins[1], ins[2]\n"
	"    pc = pc + 1\n"
	"    if op == PUSH then sp = sp + 1; stack[sp] = arg\n"
	"    elseif op == LOAD then sp = sp + 1; stack[sp] = mem[arg]\n"
	"    elseif op == STORE then mem[arg] = stack[sp]; sp = sp - 1\n"
	"    elseif op == ADD then stack[sp - 1] = stack[sp - 1] + stack[sp]; sp = sp - 1\n"
	"    elseif op == SUB then stack[sp - 1] = stack[sp - 1] - stack[sp]; sp = sp - 1\n"
	"    elseif op == MUL then stack[sp - 1] = stack[sp - 1] * stack[sp]; sp = sp - 1\n"
	"    elseif op == MOD then stack[sp - 1] = stack[sp - 1] % stack[sp]; sp = sp - 1\n"
	"    elseif op == JZ then local v = stack[sp]; sp = sp - 1; if v == 0 then pc = arg end\n"
	"    elseif op == JMP then pc = arg\n"
	"    elseif op == HALT then return stack[sp]\n"
	"    else error('bad opcode ' .. tostring(op)) end\n"
	"  end\n"
	"end\n"
	"\n"
	"local function sieve(n)\n"
	"  local composite, count, last = {}, 0, 0\n"
	"  for i = 2, n do\n"
	"    if not composite[i] then\n"
	"      count, last = count + 1, i\n"
	"      for j = i * i, n, i do composite[j] = true end\n"
	"    end\n"
	"  end\n"
	"  return count * 100000 + last\n"
	"end\n"
	"\n"
	"function pass(i)\n"
	"  local r = 0\n"
	"  for rep = 0, 2 do\n"
	"    local seed = (i * 3 + rep) % 13 + 1\n"
	"    r = (r * 31 + fib(18)) % 1000000007\n"
	"    r = (r * 31 + records(seed)) % 1000000007\n"
	"    r = (r * 31 + words(seed)) % 1000000007\n"
	"    r = (r * 31 + closures(seed)) % 1000000007\n"
	"    r = (r * 31 + vm(600 + seed)) % 1000000007\n"
	"    r = (r * 31 + sieve(8000 + seed)) % 1000000007\n"
	"  end\n"
	"  return r\n"
	"end\n";

static void setup(void)
{
	L = luaL_newstate();
	if (!L)
		exit(1);
	luaL_openlibs(L);
	if (luaL_loadbuffer(L, script, sizeof(script) - 1, "=workload") != LUA_OK || lua_pcall(L, 0, 0, 0) != LUA_OK) {
		fprintf(stderr, "lua: %s\n", lua_tostring(L, -1));
		exit(1);
	}
}

static void workload(int pass)
{
	lua_getglobal(L, "pass");
	lua_pushinteger(L, pass);
	if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
		fprintf(stderr, "lua: %s\n", lua_tostring(L, -1));
		exit(1);
	}
	checksum = checksum * 31 + (uint64_t)lua_tointeger(L, -1);
	lua_pop(L, 1);
}

int main(int argc, char **argv)
{
	int status = live_driver_main(argc, argv, setup, workload);
	lua_close(L);
	return status;
}
