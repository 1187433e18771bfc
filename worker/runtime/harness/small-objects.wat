;; A small-object allocator for CPython's object and memory domains
;; (PyObject_Malloc, PyMem_Malloc), installed in every Python job's realm
;; (python-realm.js, `installSmallObjects`; a session's interpreter, in a
;; Worker of its own, keeps dlmalloc). Pyodide's CPython is built
;; without pymalloc, so every small object it makes and drops went through
;; Emscripten's dlmalloc: a third of a CPU-bound program's time
;; (docs/performance.md). Assembled at setup by `prepare` (assemble-wat.mjs).
;;
;; Blocks of up to 512 bytes come in 32 classes of 16 bytes each, carved
;; from 16 KiB pools, which come from 128 KiB arenas taken from dlmalloc
;; (memalign) and never given back while the job runs: the job's realm and
;; its memory go with the job. A freed block goes on its class's free list
;; and serves only its class again, so the pools may take a sixteenth of
;; the memory's maximum at most (set at install): past that, and for
;; larger blocks, dlmalloc serves, and a job that fills its memory with
;; objects of one size and then of another runs out at most that much
;; sooner than with dlmalloc alone. A block reallocated to half its class
;; or less moves to a smaller one. Blocks allocated before the allocator
;; was installed (the snapshot's objects) are freed through dlmalloc: the
;; map says which pools are this allocator's.
;;
;; CPython's own calls take the common cases inline (a block off a free
;; list, a pool's block back on one): pyodide-wasm.mjs writes them into
;; PyObject_Malloc, PyObject_Free, PyMem_Malloc and PyMem_Free, and reads
;; `ctx` as laid out here, so a change to the layout or to the classes
;; changes `withFastPath` there too.
;;
;; Every function takes `ctx`, a block of the job's memory (calloc'ed at
;; install, so zero but for the limit), laid out as:
;;
;;      0  free-list heads, 4 bytes per class (class c at c * 4)
;;    256  pool cursors, 8 bytes per class: next block, end of its pool
;;    768  arena cursor: next pool, end of its arena
;;    776  bytes of arenas taken so far
;;    780  the most the arenas may take (set at install)
;;   1024  the map: one byte per 16 KiB of the memory's maximum, the class
;;         of the pool there, or 0 where no pool of this allocator is
(module
  (import "env" "memory" (memory 0))
  (import "env" "malloc" (func $sys_malloc (param i32) (result i32)))
  (import "env" "free" (func $sys_free (param i32)))
  (import "env" "realloc" (func $sys_realloc (param i32 i32) (result i32)))
  (import "env" "memalign" (func $sys_memalign (param i32 i32) (result i32)))

  ;; A block of `size` bytes (a unique one for 0), or 0: 16-byte aligned
  ;; from a pool, 8-byte aligned from dlmalloc.
  (func $alloc (export "alloc") (param $ctx i32) (param $size i32) (result i32)
    (local $c i32) (local $head i32) (local $block i32)
    (if (i32.gt_u (local.get $size) (i32.const 512))
      (then (return (call $sys_malloc (local.get $size)))))
    (local.set $c (i32.shr_u (i32.add (local.get $size) (i32.const 15)) (i32.const 4)))
    (if (i32.eqz (local.get $c)) (then (local.set $c (i32.const 1))))
    (local.set $head (i32.add (local.get $ctx) (i32.shl (local.get $c) (i32.const 2))))
    (local.set $block (i32.load (local.get $head)))
    (if (local.get $block)
      (then
        (i32.store (local.get $head) (i32.load (local.get $block)))
        (return (local.get $block))))
    (local.set $block (call $carve (local.get $ctx) (local.get $c)))
    (if (local.get $block) (then (return (local.get $block))))
    (call $sys_malloc (local.get $size)))

  ;; A new block of class `c` from its pool, or from a new pool; 0 when no
  ;; pool can be had.
  (func $carve (param $ctx i32) (param $c i32) (result i32)
    (local $cursor i32) (local $next i32) (local $size i32) (local $pool i32)
    (local.set $size (i32.shl (local.get $c) (i32.const 4)))
    (local.set $cursor (i32.add (i32.add (local.get $ctx) (i32.const 256)) (i32.shl (local.get $c) (i32.const 3))))
    (local.set $next (i32.load (local.get $cursor)))
    (if (i32.and
          (i32.ne (local.get $next) (i32.const 0))
          (i32.le_u (i32.add (local.get $next) (local.get $size)) (i32.load offset=4 (local.get $cursor))))
      (then
        (i32.store (local.get $cursor) (i32.add (local.get $next) (local.get $size)))
        (return (local.get $next))))
    (local.set $pool (call $pool (local.get $ctx)))
    (if (i32.eqz (local.get $pool)) (then (return (i32.const 0))))
    (i32.store8 offset=1024 (i32.add (local.get $ctx) (i32.shr_u (local.get $pool) (i32.const 14)))
      (local.get $c))
    (i32.store (local.get $cursor) (i32.add (local.get $pool) (local.get $size)))
    (i32.store offset=4 (local.get $cursor) (i32.add (local.get $pool) (i32.const 16384)))
    (local.get $pool))

  ;; A 16 KiB pool, 16 KiB aligned, from the current arena or a new one; 0
  ;; when the arenas are at their limit or dlmalloc has no more memory.
  (func $pool (param $ctx i32) (result i32)
    (local $next i32) (local $arena i32)
    (local.set $next (i32.load offset=768 (local.get $ctx)))
    (if (i32.lt_u (local.get $next) (i32.load offset=772 (local.get $ctx)))
      (then
        (i32.store offset=768 (local.get $ctx) (i32.add (local.get $next) (i32.const 16384)))
        (return (local.get $next))))
    (if (i32.gt_u
          (i32.add (i32.load offset=776 (local.get $ctx)) (i32.const 131072))
          (i32.load offset=780 (local.get $ctx)))
      (then (return (i32.const 0))))
    (local.set $arena (call $sys_memalign (i32.const 16384) (i32.const 131072)))
    (if (i32.eqz (local.get $arena)) (then (return (i32.const 0))))
    ;; One that ends at the top of a 4 GiB memory would wrap the ends the
    ;; cursors compare against: dlmalloc keeps it.
    (if (i32.gt_u (local.get $arena) (i32.const 0xfffd0000))
      (then
        (call $sys_free (local.get $arena))
        (return (i32.const 0))))
    (i32.store offset=776 (local.get $ctx) (i32.add (i32.load offset=776 (local.get $ctx)) (i32.const 131072)))
    (i32.store offset=768 (local.get $ctx) (i32.add (local.get $arena) (i32.const 16384)))
    (i32.store offset=772 (local.get $ctx) (i32.add (local.get $arena) (i32.const 131072)))
    (local.get $arena))

  ;; The class of the pool `block` is in, or 0 if it is not in one.
  (func $class (param $ctx i32) (param $block i32) (result i32)
    (i32.load8_u offset=1024 (i32.add (local.get $ctx) (i32.shr_u (local.get $block) (i32.const 14)))))

  (func $free (export "free") (param $ctx i32) (param $block i32)
    (local $c i32) (local $head i32)
    (if (i32.eqz (local.get $block)) (then (return)))
    (local.set $c (call $class (local.get $ctx) (local.get $block)))
    (if (i32.eqz (local.get $c))
      (then
        (call $sys_free (local.get $block))
        (return)))
    (local.set $head (i32.add (local.get $ctx) (i32.shl (local.get $c) (i32.const 2))))
    (i32.store (local.get $block) (i32.load (local.get $head)))
    (i32.store (local.get $head) (local.get $block)))

  ;; A block of `size` bytes with the first bytes of `block`; `block` stays
  ;; if it has room and would not fit a class of half its size, and one of
  ;; dlmalloc's stays dlmalloc's.
  (func $realloc (export "realloc") (param $ctx i32) (param $block i32) (param $size i32) (result i32)
    (local $c i32) (local $moved i32)
    (if (i32.eqz (local.get $block)) (then (return (call $alloc (local.get $ctx) (local.get $size)))))
    (if (i32.eqz (local.get $size)) (then (local.set $size (i32.const 1))))
    (local.set $c (call $class (local.get $ctx) (local.get $block)))
    (if (i32.eqz (local.get $c))
      (then (return (call $sys_realloc (local.get $block) (local.get $size)))))
    (if (i32.and
          (i32.le_u (local.get $size) (i32.shl (local.get $c) (i32.const 4)))
          (i32.gt_u (local.get $size) (i32.shl (local.get $c) (i32.const 3))))
      (then (return (local.get $block))))
    (local.set $moved (call $alloc (local.get $ctx) (local.get $size)))
    (if (i32.eqz (local.get $moved))
      (then
        ;; A shrink that found no smaller block keeps its own.
        (if (i32.le_u (local.get $size) (i32.shl (local.get $c) (i32.const 4)))
          (then (return (local.get $block))))
        (return (i32.const 0))))
    (memory.copy (local.get $moved) (local.get $block)
      (select (local.get $size) (i32.shl (local.get $c) (i32.const 4))
        (i32.lt_u (local.get $size) (i32.shl (local.get $c) (i32.const 4)))))
    (call $free (local.get $ctx) (local.get $block))
    (local.get $moved))

  ;; `count` zeroed elements of `size` bytes, or 0 if that overflows.
  (func $calloc (export "calloc") (param $ctx i32) (param $count i32) (param $size i32) (result i32)
    (local $bytes i64) (local $block i32)
    (local.set $bytes (i64.mul (i64.extend_i32_u (local.get $count)) (i64.extend_i32_u (local.get $size))))
    (if (i64.gt_u (local.get $bytes) (i64.const 0x7fffffff)) (then (return (i32.const 0))))
    (local.set $block (call $alloc (local.get $ctx) (i32.wrap_i64 (local.get $bytes))))
    (if (local.get $block)
      (then (memory.fill (local.get $block) (i32.const 0) (i32.wrap_i64 (local.get $bytes)))))
    (local.get $block))
)
