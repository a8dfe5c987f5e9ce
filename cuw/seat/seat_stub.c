/* The seat's native fast path: a foreign TU's stub, or an owned TU's cached compile, without
 * starting Python.
 *
 * Compiled once per job (cuw/seat/native.py install_native) into the seat folder, where it
 * stands as the nvcc seat and, hard-linked, as the host seat (HOST_SCRIPT); which one it is, it
 * reads from the file the kernel ran (host_seat below). The partition
 * rule stays in Python: at install the seat writes a table (seat-stub.tsv) of the source files
 * under the source root that this shard owns (section "owned": key, owner or null, key as JSON)
 * and that it does NOT own (section "keys"), and everything an owned compile needs beyond the
 * argv: the cache tool, its environment, the real nvcc and host compilers, the extra args, and
 * the LC_CTYPE coercion this program found for a C locale and the job's own locale at install.
 * This program handles two cases of a compile of exactly one source under the source root,
 * not a probe, itself:
 * - its key is a foreign one: it writes what the Python seat's stub writes (the empty object,
 *   the depfile, the same JSON log line);
 * - its key is owned (or the seat partitions nothing: the link job): it runs the command the
 *   Python seat runs (``<cache> <real nvcc> <args, -dc/-dw spelled out, -ccbin unseated>
 *   [-ccbin <real g++>] <extra args>``, or ``<cache> <real compiler> <args>``) with the same
 *   environment, reads the call's outcome from the cache's per-call stats log, and appends the
 *   same "compiled" log line (cuw/seat/runtime.py _stub_or_compile, _compile_cached).
 * An owned compile past the job's deadline ("deadline" line: a Unix time) is the Python seat's: it
 * defers it (cuw/seat/runtime.py past_deadline).
 * A call that is not one of the build's TUs (not a compile of one source, a build-system probe; for
 * a host compiler also nvcc's intermediates and sources outside the source root) runs the real tool
 * untouched, as the Python seat runs it, and for nvcc with the same "passthrough" or "probe" log
 * line: a configure makes dozens of these calls (CMake's compiler identification alone about
 * twenty), and an interpreter start costs each about 90 ms.
 * Every other call, and any doubt or error before the compile starts, execs the Python seat with
 * the same argv. The argv reading below mirrors cuw/toolchain/nvcc_args.py parse() line by line;
 * tests/test_seat_stub.py runs both on the same argv shapes and compares the results.
 *
 * SEAT_DIR: the seat folder, given at compile time: seat-stub.tsv (the table) and python/ (the
 * Python seat's scripts, one name per tool) are in it.
 * CUW_SEAT_STUB_NO_FALLBACK (environment, tests only): exit 97 instead of the exec, so a test
 * sees which calls the native path handled itself.
 *
 * On Windows (_WIN32: MSVC or mingw-w64) this program is only the launcher: CMake's CUDACXX and
 * torch's nvcc must be an .exe there, and a script with a #! line is not one. It handles no call
 * itself (the key and path rules above are POSIX-shaped); it runs the Python seat, like pip's
 * console-script launchers: the interpreter named on the script's #! line, that line's options,
 * the script, then its own command line after the program name, verbatim (so Windows quoting
 * survives untouched), and exits with the child's code. See the _WIN32 part at the end.
 */
#ifndef SEAT_DIR
#error "SEAT_DIR (the seat folder) must be defined"
#endif
#define PYTHON_DIR SEAT_DIR "/python"

#define NO_FALLBACK_EXIT 97

#ifndef _WIN32
#include <errno.h>
#include <fcntl.h>
#include <langinfo.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define SEAT_TABLE SEAT_DIR "/seat-stub.tsv"

/* Generated from the Python seat's own sets when the stub is compiled (cuw/seat/native.py,
   tables_header): the option tables of cuw/toolchain/nvcc_args.py, the source suffixes, the probe
   markers, the source filter's variables and the table's magic line. */
#include "seat_tables.h"

/* Options whose meaning the Python reading does not see (more argv in a file): leave them to it. */
static const char *const DEFER_OPTIONS[] = {"-optf", "--options-file", NULL};
/* Options known to take no separate value, beside the lists above and glued forms (-DX, -I/p, -O2,
 * -Wall, -fPIC, -m64, -g3). A source right after an option outside all of these could be that
 * option's value: such a call goes to the Python seat. */
static const char *const KNOWN_VALUELESS[] = {
    "-g", "-G", "-w", "-v", "-lineinfo", "-shared", "-pthread", "-pipe", "-Werror", "--keep",
    "--expt-relaxed-constexpr", "--expt-extended-lambda", "--extended-lambda", "-use_fast_math",
    "--use_fast_math", "-forward-unknown-to-host-compiler", "-forward-unknown-to-host-linker", NULL};

static char **g_argv;
static int g_host; /* this program stands as the host seat (gcc, g++, cc, c++), not as nvcc's */

static int in_list(const char *s, size_t n, const char *const *list) {
    for (; *list; ++list)
        if (strlen(*list) == n && memcmp(*list, s, n) == 0) return 1;
    return 0;
}

static int known_flag(const char *name, size_t n, int has_value) {
    if (has_value) return 1; /* -opt=value */
    if (n > 2 && name[0] == '-' && strchr("DIUOWfmg", name[1])) return 1;
    return in_list(name, n, KNOWN_VALUELESS) || in_list(name, n, COMPILE_FLAGS) || in_list(name, n, NOT_A_COMPILE) ||
           in_list(name, n, DEPFILE_WITH_COMPILE);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

static int is_source(const char *s) {
    for (const char *const *p = SOURCE_SUFFIXES; *p; ++p)
        if (ends_with(s, *p)) return 1;
    return 0;
}

/* The name this program was run by: the path given to execve (a link in the shadow CUDA_HOME's
 * bin), which is what a script's interpreter gets as sys.argv[0]; argv[0] if the kernel lacks it. */
static const char *tool_name(void) {
    const char *path = (const char *)getauxval(AT_EXECFN);
    if (!path) path = g_argv[0];
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The Python seat decides this call: same argv (argv[0] kept), run by the same tool name. */
static void fallback(void) {
    if (getenv("CUW_SEAT_STUB_NO_FALLBACK")) _exit(NO_FALLBACK_EXIT);
    char target[4352];
    const char *tool = g_host ? tool_name() : "nvcc";
    snprintf(target, sizeof target, "%s/%s", PYTHON_DIR, tool);
    execv(target, g_argv);
    fprintf(stderr, "cuw seat: cannot run %s: %s\n", target, strerror(errno));
    _exit(127);
}

/* A heap copy of s[0:n]. */
static char *dup_n(const char *s, size_t n) {
    char *out = malloc(n + 1);
    if (!out) fallback();
    memcpy(out, s, n);
    out[n] = 0;
    return out;
}

/* os.path.splitext(p)[0] */
static char *strip_ext(const char *p) {
    const char *sep = strrchr(p, '/');
    const char *dot = strrchr(p, '.');
    if (dot && (!sep || dot > sep)) {
        for (const char *f = sep ? sep + 1 : p; f < dot; ++f)
            if (*f != '.') return dup_n(p, (size_t)(dot - p));
    }
    return dup_n(p, strlen(p));
}

static char *concat(const char *a, const char *b) {
    size_t x = strlen(a), y = strlen(b);
    char *out = malloc(x + y + 1);
    if (!out) fallback();
    memcpy(out, a, x);
    memcpy(out + x, b, y + 1);
    return out;
}

/* os.path.abspath(path) against cwd (posixpath.normpath). Paths starting with exactly "//"
 * keep them in Python; those fall back. */
static char *abspath(const char *path, const char *cwd) {
    char *joined = path[0] == '/' ? dup_n(path, strlen(path)) : concat(concat(cwd, "/"), path);
    if (joined[0] == '/' && joined[1] == '/' && joined[2] != '/') fallback();
    size_t n = strlen(joined);
    char *out = malloc(n + 2);
    if (!out) fallback();
    size_t len = 0; /* out holds "/a/b" components */
    const char *p = joined;
    while (*p) {
        while (*p == '/') ++p;
        const char *start = p;
        while (*p && *p != '/') ++p;
        size_t clen = (size_t)(p - start);
        if (clen == 0 || (clen == 1 && start[0] == '.')) continue;
        if (clen == 2 && start[0] == '.' && start[1] == '.') {
            while (len > 0 && out[len - 1] != '/') --len;
            if (len > 0) --len; /* drop the '/' too; ".." at the root stays at the root */
            continue;
        }
        out[len++] = '/';
        memcpy(out + len, start, clen);
        len += clen;
    }
    if (len == 0) out[len++] = '/';
    out[len] = 0;
    return out;
}

/* os.makedirs(dirname(abspath(path)), exist_ok=True); returns 0 on success. */
static int make_parent_dirs(const char *path, const char *cwd) {
    char *abs = abspath(path, cwd);
    char *slash = strrchr(abs, '/');
    if (!slash || slash == abs) return 0;
    *slash = 0;
    for (char *p = abs + 1;; ++p) {
        if (*p == '/' || *p == 0) {
            char keep = *p;
            *p = 0;
            if (mkdir(abs, 0777) != 0) {
                struct stat st;
                if (errno != EEXIST || stat(abs, &st) != 0 || !S_ISDIR(st.st_mode)) return -1;
            }
            *p = keep;
            if (!keep) break;
        }
    }
    return 0;
}

static int write_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

static char *read_file(const char *path, size_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return NULL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf || got != (size_t)st.st_size) {
        free(buf);
        return NULL;
    }
    buf[got] = 0;
    *size = got;
    return buf;
}

static int write_file(const char *path, const char *buf, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return -1;
    int rc = write_all(fd, buf, n);
    return close(fd) != 0 ? -1 : rc;
}

/* json.dumps of a str, for the printable-ASCII strings this path accepts (else fall back). */
static char *json_string(const char *s) {
    size_t n = strlen(s);
    char *out = malloc(2 * n + 3), *o = out;
    if (!out) fallback();
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
        if (*p < 0x20 || *p > 0x7e) fallback(); /* json.dumps escapes these as \uXXXX */
        if (*p == '"' || *p == '\\') *o++ = '\\';
        *o++ = (char)*p;
    }
    *o++ = '"';
    *o = 0;
    return out;
}

#define MAX_LIST 256

struct table {
    const char *root, *empty, *log;
    const char *tree; /* the job's source and build trees: probe markers count below it only */
    int host_partitioned;
    const char *host_tools; /* " gcc g++ " : the host compilers the seat has a real one for */
    const char *source_filter; /* "I/N" when the table was written beside the source filter (its keys left out) */
    int partitioned; /* the seat has a partition ("partition" line) */
    int has_deadline; /* a "deadline" line: owned compiles after it are the Python seat's to defer */
    double deadline;
    char *owned; /* "key\towner-or-null\tjson-key\n" lines: the keys this seat compiles */
    char *keys; /* "key\towner\tjson-key\n" lines to the end: the keys another shard owns */
    /* The owned compile ("compile" line present): everything but the argv. */
    int compile;
    const char *cache, *nvcc, *statslog_var;
    /* The LC_CTYPE coercion as the stub found it on this machine at install (native.py
       _locale_lines): for a C locale ("ctype_c": the target, or empty for none), and the one
       locale name known to load ("ctype_loads"); NULL when not found out. */
    const char *ctype_c, *ctype_loads;
    const char *env[MAX_LIST];
    int n_env;
    const char *extra[MAX_LIST];
    int n_extra;
    const char *real_name[MAX_LIST], *real_path[MAX_LIST];
    int n_real;
};

static int add_item(const char **list, int *n, const char *value) {
    if (*n >= MAX_LIST) return -1;
    list[(*n)++] = value;
    return 0;
}

/* "name\tvalue\n" header lines, then "owned\n" and the owned key lines, then "keys\n" and the
   sorted foreign key lines to the end. */
static int read_table(struct table *t) {
    size_t size;
    char *buf = read_file(SEAT_TABLE, &size);
    if (!buf || strncmp(buf, TABLE_MAGIC "\n", sizeof TABLE_MAGIC) != 0) return -1;
    char *p = buf + sizeof TABLE_MAGIC;
    while (*p) {
        char *eol = strchr(p, '\n');
        if (!eol) return -1;
        *eol = 0;
        if (strcmp(p, "owned") == 0) {
            t->owned = eol + 1;
            for (p = eol + 1; *p; p = eol + 1) { /* the owned lines hold a tab; "keys" ends them */
                eol = strchr(p, '\n');
                if (!eol) return -1;
                if (eol - p == 4 && memcmp(p, "keys", 4) == 0) break;
            }
            if (!*p) return -1;
            *p = 0; /* the owned section ends here */
            t->keys = eol + 1;
            if (t->compile && !(t->cache && t->nvcc)) return -1;
            return t->root && t->empty && t->log && t->host_tools ? 0 : -1;
        }
        char *tab = strchr(p, '\t');
        if (!tab) return -1;
        *tab = 0;
        char *value = tab + 1;
        if (strcmp(p, "root") == 0) t->root = value;
        else if (strcmp(p, "empty") == 0) t->empty = value;
        else if (strcmp(p, "log") == 0) t->log = value;
        else if (strcmp(p, "tree") == 0) t->tree = value;
        else if (strcmp(p, "host_partitioned") == 0) t->host_partitioned = strcmp(value, "1") == 0;
        else if (strcmp(p, "host_tools") == 0) t->host_tools = value;
        else if (strcmp(p, "source_filter") == 0) t->source_filter = value;
        else if (strcmp(p, "partition") == 0) t->partitioned = 1;
        else if (strcmp(p, "deadline") == 0) {
            char *end;
            t->deadline = strtod(value, &end);
            if (end == value || *end) return -1;
            t->has_deadline = 1;
        }
        else if (strcmp(p, "compile") == 0) t->compile = strcmp(value, "1") == 0;
        else if (strcmp(p, "cache") == 0) t->cache = value;
        else if (strcmp(p, "nvcc") == 0) t->nvcc = value;
        else if (strcmp(p, "statslog_var") == 0) t->statslog_var = value;
        else if (strcmp(p, "ctype_c") == 0) t->ctype_c = value;
        else if (strcmp(p, "ctype_loads") == 0) t->ctype_loads = value;
        else if (strcmp(p, "env") == 0) {
            if (!strchr(value, '=') || add_item(t->env, &t->n_env, value) != 0) return -1;
        } else if (strcmp(p, "extra") == 0) {
            if (add_item(t->extra, &t->n_extra, value) != 0) return -1;
        } else if (strcmp(p, "real") == 0) {
            char *sep = strchr(value, '\t');
            if (!sep || t->n_real >= MAX_LIST) return -1;
            *sep = 0;
            t->real_name[t->n_real] = value;
            t->real_path[t->n_real++] = sep + 1;
        }
        p = eol + 1;
    }
    return -1;
}

/* The real compiler behind a host tool name, or NULL (config.real_compilers.get(name)). */
static const char *real_compiler(const struct table *t, const char *name) {
    for (int i = 0; i < t->n_real; ++i)
        if (strcmp(t->real_name[i], name) == 0) return t->real_path[i];
    return NULL;
}

/* The key's line in a section of the table (foreign or owned keys): owner and JSON form, or NULL. */
static const char *find_key(const char *section, const char *key, const char **json_key) {
    size_t n = strlen(key);
    for (const char *line = section; *line;) {
        const char *eol = strchr(line, '\n');
        if (!eol) return NULL;
        if (strncmp(line, key, n) == 0 && line[n] == '\t') {
            const char *owner = line + n + 1;
            const char *tab = memchr(owner, '\t', (size_t)(eol - owner));
            if (!tab) return NULL;
            *json_key = dup_n(tab + 1, (size_t)(eol - tab - 1));
            return dup_n(owner, (size_t)(tab - owner));
        }
        line = eol + 1;
    }
    return NULL;
}

/* cuw/seat/runtime.py is_probe(): a marker inside a path component, below the job's tree when
   the path is under it (a work folder named "conftest" above the tree is not a probe). */
static int probe(const char *s, const char *tree) {
    if (!s) return 0;
    size_t tree_len = tree ? strlen(tree) : 0;
    if (tree_len && strncmp(s, tree, tree_len) == 0 && (s[tree_len] == '/' || !s[tree_len]))
        s += s[tree_len] ? tree_len + 1 : tree_len;
    while (*s) {
        size_t len = strcspn(s, "/");
        for (const char *const *m = PROBE_MARKERS; *m; ++m) {
            size_t mlen = strlen(*m);
            for (size_t i = 0; mlen <= len && i + mlen <= len; ++i)
                if (memcmp(s + i, *m, mlen) == 0) return 1;
        }
        s += len;
        if (*s == '/') ++s;
    }
    return 0;
}

/* -- the owned compile (cuw/seat/runtime.py _compile_cached) ------------------------------- */

static const char *const CCBIN[] = {"-ccbin", "--compiler-bindir", NULL};

/* _unseated_ccbin's real(): a -ccbin value that resolves to the host seat names the real compiler. */
static const char *unseated(const struct table *t, const char *value) {
    char resolved[4096];
    if (!realpath(value, resolved)) fallback(); /* Python resolves what it can of a missing path */
    const char *base = strrchr(resolved, '/');
    if (strcmp(base ? base + 1 : resolved, HOST_SCRIPT) != 0) return value;
    const char *slash = strrchr(value, '/');
    const char *real = real_compiler(t, slash ? slash + 1 : value);
    if (!real) real = real_compiler(t, "g++");
    return real ? real : value;
}

static char **spawn_argv; /* the command, NULL-terminated */
static int spawn_argc;

static void push_arg(const char *arg, int capacity) {
    if (spawn_argc >= capacity) fallback();
    spawn_argv[spawn_argc++] = (char *)arg;
}

/* [cache, real nvcc, *_unseated_ccbin(cache_safe_args(argv)), *_host_compiler_args(argv), *extra_args]
   or, for a host compiler, [cache, real compiler, *argv]. */
static void build_command(const struct table *t, int argc, char **argv) {
    int capacity = 2 * argc + t->n_extra + 8;
    spawn_argv = calloc((size_t)capacity, sizeof(char *));
    if (!spawn_argv) fallback();
    push_arg(t->cache, capacity);
    if (g_host) {
        const char *real = real_compiler(t, tool_name());
        if (!real) fallback();
        push_arg(real, capacity);
        for (int i = 1; i < argc; ++i) push_arg(argv[i], capacity);
        push_arg(NULL, capacity);
        return;
    }
    push_arg(t->nvcc, capacity);
    /* cache_safe_args(): -dc/-dw spelled out (EXPANSIONS) */
    int first = spawn_argc;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (strcmp(a, "-dc") == 0 || strcmp(a, "--device-c") == 0) {
            push_arg("-rdc=true", capacity);
            push_arg("-c", capacity);
        } else if (strcmp(a, "-dw") == 0 || strcmp(a, "--device-w") == 0) {
            push_arg("-rdc=false", capacity);
            push_arg("-c", capacity);
        } else {
            push_arg(a, capacity);
        }
    }
    /* _unseated_ccbin(), over the expanded args */
    for (int i = first; i < spawn_argc; ++i) {
        const char *a = spawn_argv[i];
        const char *eq = strchr(a, '=');
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        if (eq && in_list(a, name_len, CCBIN)) {
            const char *real = unseated(t, eq + 1);
            if (real != eq + 1) {
                char *joined = malloc(name_len + strlen(real) + 2);
                if (!joined) fallback();
                memcpy(joined, a, name_len + 1); /* the name and its '=' */
                strcpy(joined + name_len + 1, real);
                spawn_argv[i] = joined;
            }
        } else if (!eq && in_list(a, name_len, CCBIN) && i + 1 < spawn_argc) {
            spawn_argv[i + 1] = (char *)unseated(t, spawn_argv[i + 1]);
            ++i;
        }
    }
    /* _host_compiler_args(): -ccbin <real g++> unless the build chose one */
    int chose = 0;
    for (int i = 1; i < argc; ++i) {
        const char *eq = strchr(argv[i], '=');
        if (in_list(argv[i], eq ? (size_t)(eq - argv[i]) : strlen(argv[i]), CCBIN)) chose = 1;
    }
    if (!chose) {
        const char *real = real_compiler(t, "g++");
        if (!real) real = real_compiler(t, "gcc");
        if (real) {
            push_arg("-ccbin", capacity);
            push_arg(real, capacity);
        }
    }
    for (int i = 0; i < t->n_extra; ++i) push_arg(t->extra[i], capacity);
    push_arg(NULL, capacity);
}

/* The LC_CTYPE the Python seat's interpreter puts in its own environment at start (PEP 538: a C or
   POSIX LC_CTYPE, LC_ALL unset, is coerced to the first UTF-8 locale that loads), or NULL. The
   cache hashes LC_CTYPE: a compile through either seat must hash the same.
   Loading a locale reads the C library's alias file and maps the locale's files (here about
   0.1 ms a call, a seventh of the stub's own cost on a cache hit), so the table carries what the C library answered
   at install (t, NULL in the probe) for a C locale and for the job's own locale name; any other
   name, or a LOCPATH (which moves where locales are found), is asked here. */
static const char *coerced_ctype(const struct table *t) {
    const char *all = getenv("LC_ALL");
    if (all && *all) return NULL;
    const char *locpath = getenv("LOCPATH");
    if (t && !(locpath && *locpath)) {
        /* The name setlocale(LC_CTYPE, "") loads: LC_CTYPE, else LANG (empty ones skipped), else C. */
        const char *name = getenv("LC_CTYPE");
        if (!name || !*name) name = getenv("LANG");
        if (!name || !*name || strcmp(name, "C") == 0 || strcmp(name, "POSIX") == 0) {
            if (t->ctype_c) return *t->ctype_c ? t->ctype_c : NULL;
        } else if (t->ctype_loads && strcmp(name, t->ctype_loads) == 0) {
            return NULL;
        }
    }
    setlocale(LC_CTYPE, "");
    const char *ctype = setlocale(LC_CTYPE, NULL);
    if (!ctype || (strcmp(ctype, "C") != 0 && strcmp(ctype, "POSIX") != 0)) return NULL;
    static const char *const targets[] = {"C.UTF-8", "C.utf8", "UTF-8", NULL};
    for (const char *const *target = targets; *target; ++target) {
        if (!setlocale(LC_CTYPE, *target)) continue;
        const char *codeset = nl_langinfo(CODESET);
        if (codeset && *codeset) return *target;
        setlocale(LC_CTYPE, "");
    }
    return NULL;
}

/* The child's environment: the Python seat's own (with its LC_CTYPE coercion); for the cache
   (``cached``), cache.scrub() of it updated with the cache's environment, then the stats log variable. */
static char **build_env(const struct table *t, const char *statslog, int cached) {
    size_t n = 0;
    for (char **e = environ; *e; ++e) ++n;
    char **env = calloc(n + (size_t)t->n_env + 3, sizeof(char *));
    if (!env) fallback();
    size_t k = 0;
    const char *ctype = coerced_ctype(t);
    if (ctype) env[k++] = concat("LC_CTYPE=", ctype);
    for (char **e = environ; *e; ++e) {
        if (cached && (strncmp(*e, "CCACHE_", 7) == 0 || strncmp(*e, "SCCACHE_", 8) == 0)) continue;
        if (ctype && strncmp(*e, "LC_CTYPE=", 9) == 0) continue;
        int replaced = 0; /* dict.update: a key of the cache's environment replaces the inherited one */
        for (int i = 0; cached && i < t->n_env && !replaced; ++i) {
            size_t len = (size_t)(strchr(t->env[i], '=') - t->env[i]);
            replaced = strncmp(*e, t->env[i], len + 1) == 0;
        }
        if (!replaced) env[k++] = *e;
    }
    for (int i = 0; cached && i < t->n_env; ++i) env[k++] = (char *)t->env[i];
    if (statslog) env[k++] = concat(concat(t->statslog_var, "="), statslog);
    env[k] = NULL;
    return env;
}

/* Python's subprocess closes every inherited descriptor above stderr (close_fds=True). */
static void close_inherited(void) {
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536) max = 65536;
    for (int fd = 3; fd < max; ++fd) close(fd);
}

/* One line at the end of the seat log (runtime.py _log); 0, or -1 with errno set. */
static int append_log(const struct table *t, const char *line, size_t n) {
    int fd = open(t->log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return -1;
    if (write_all(fd, line, n) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return close(fd);
}

/* subprocess.call(argv, env=env) as the Python seat runs it: SIGPIPE and SIGXFSZ at their defaults
   (restore_signals), every descriptor above stderr closed (close_fds); its code, or minus the
   signal that ended it. vfork: nothing of this process is copied for a child that only execs (the
   child touches no memory but its own stack). wait4: the rusage of the child's whole tree (the
   cache, nvcc, cicc, ...: runtime.py _measured reads the same from RUSAGE_CHILDREN). SPAWN_FAILED
   when no child could be started (the caller hands over before anything ran). */
#define SPAWN_FAILED (-1000)
static int spawn_wait(const char *path, char **argv, char **env, struct rusage *usage) {
    pid_t pid = vfork();
    if (pid < 0) return SPAWN_FAILED;
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        signal(SIGXFSZ, SIG_DFL);
        close_inherited();
        execve(path, argv, env);
        _exit(127);
    }
    int status = 0;
    memset(usage, 0, sizeof *usage);
    while (wait4(pid, &status, 0, usage) < 0) {
        if (errno != EINTR) {
            status = 127 << 8;
            break;
        }
    }
    return WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* cache.Ccache.call_outcome(): hit, miss or uncacheable:<first reason>, from one call's stats log. */
static const char *call_outcome(char *text) {
    int hit = 0, miss = 0;
    const char *reason = NULL;
    for (char *line = text; line && *line;) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = 0;
        char *next = eol ? eol + 1 : NULL;
        if (line[0] != '#') {
            while (is_space(*line)) ++line;
            size_t n = strlen(line);
            while (n > 0 && is_space(line[n - 1])) --n;
            if (n > 0) {
                hit |= in_list(line, n, CACHE_HITS);
                miss |= in_list(line, n, CACHE_MISSES);
                if (!reason && in_list(line, n, CACHE_UNCACHEABLE)) reason = dup_n(line, n);
            }
        }
        line = next;
    }
    if (hit) return "hit";
    if (miss) return "miss";
    return concat("uncacheable:", reason ? reason : "unknown");
}

/* repr(round(x, 3)) for the non-negative times the log holds. */
static void format_seconds(char *out, size_t size, double x) {
    snprintf(out, size, "%.3f", x);
    size_t n = strlen(out);
    while (n > 0 && out[n - 1] == '0' && out[n - 2] != '.') out[--n] = 0;
}

static double now(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The call's stats log as a memory file, not a file in the seat folder: the cache writes it
   through this process's /proc/<pid>/fd/<fd> (the child inherits no descriptor for it), and this
   process reads it back after the compile. Creating and removing a file per call costs a
   file system's inode allocation (on ext4 up to a millisecond here: it steps over the inodes
   recently freed by the calls before). Returns the descriptor and sets *path, or -1 where
   there is no memfd_create or no /proc: the caller then makes a file as before. */
static int memory_statslog(char **path) {
#if defined(SYS_memfd_create)
    int fd = (int)syscall(SYS_memfd_create, "cuw-statslog", 1U /* MFD_CLOEXEC */);
    if (fd < 0) return -1;
    char proc_path[64];
    snprintf(proc_path, sizeof proc_path, "/proc/%ld/fd/%d", (long)getpid(), fd);
    if (access(proc_path, W_OK) != 0) { /* no /proc mounted here */
        close(fd);
        return -1;
    }
    *path = dup_n(proc_path, strlen(proc_path));
    return fd;
#else
    (void)path;
    return -1;
#endif
}

/* The whole content of an open file, from its start; NULL on an error. */
static char *read_fd(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return NULL;
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t r = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (!buf || got != (size_t)st.st_size) {
        free(buf);
        return NULL;
    }
    buf[got] = 0;
    return buf;
}

/* The owned TU through the cache, then the "compiled" log line; exits with the compile's code. */
static int compile_cached(const struct table *t, int argc, char **argv, const char *json_key, const char *owner,
                          const char *json_output) {
    double start = now(CLOCK_MONOTONIC);
    build_command(t, argc, argv);
    if (access(t->cache, X_OK) != 0) fallback(); /* the Python seat says why */
    char *statslog = NULL;
    int statslog_fd = -1; /* the stats log as a memory file (statslog names it), or -1 */
    if (t->statslog_var && t->statslog_var[0]) {
        statslog_fd = memory_statslog(&statslog);
        if (statslog_fd < 0) {
            const char *slash = strrchr(t->log, '/');
            char *dir = dup_n(t->log, (size_t)(slash - t->log));
            statslog = concat(dir[0] ? dir : "/", dir[0] ? "/cuw-statslog-XXXXXX" : "cuw-statslog-XXXXXX");
            int fd = mkstemp(statslog);
            if (fd < 0) fallback();
            close(fd);
        }
    }
    char **env = build_env(t, statslog, 1);
    /* From here on the compile has started: no more handing over. */
    struct rusage usage;
    int rc = spawn_wait(t->cache, spawn_argv, env, &usage);
    if (rc == SPAWN_FAILED) {
        if (statslog && statslog_fd < 0) unlink(statslog);
        fallback();
    }
    const char *outcome = "unknown";
    if (statslog_fd >= 0) {
        char *text = read_fd(statslog_fd);
        outcome = call_outcome(text ? text : dup_n("", 0));
        close(statslog_fd);
    } else if (statslog) {
        size_t size;
        char *text = read_file(statslog, &size);
        outcome = call_outcome(text ? text : dup_n("", 0));
        unlink(statslog);
    }
    char seconds[64], at[64], measured[160] = "";
    format_seconds(seconds, sizeof seconds, now(CLOCK_MONOTONIC) - start);
    format_seconds(at, sizeof at, now(CLOCK_REALTIME));
    const char *cache_name = strrchr(t->cache, '/') ? strrchr(t->cache, '/') + 1 : t->cache;
    if (strncmp(cache_name, "sccache", 7) != 0) { /* sccache's server runs the compiler, not a child */
        char cpu[64];
        double cpu_s = (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec / 1e6 + (double)usage.ru_stime.tv_sec +
                       (double)usage.ru_stime.tv_usec / 1e6;
        format_seconds(cpu, sizeof cpu, cpu_s);
        snprintf(measured, sizeof measured, "\"cpu_s\": %s, \"peak_mb\": %ld, ", cpu, (long)usage.ru_maxrss / 1024);
    }
    size_t line_size = strlen(json_key) + strlen(json_output) + strlen(owner) + strlen(outcome) + 512;
    char *line = malloc(line_size);
    int n = line ? snprintf(line, line_size,
                            "{\"action\": \"compiled\", \"at\": %s, %s%s\"key\": %s, \"outcome\": \"%s\", \"output\": %s, "
                            "\"owner\": %s, \"pid\": %ld, \"rc\": %d, \"seconds\": %s}\n",
                            at, measured, g_host ? "\"kind\": \"host\", " : "", json_key, outcome, json_output, owner,
                            (long)getpid(), rc, seconds)
                 : -1;
    if (n < 0 || (size_t)n >= line_size || append_log(t, line, (size_t)n) != 0) {
        fprintf(stderr, "cuw seat: cannot write the seat log %s: %s\n", t->log, strerror(errno));
        return 1;
    }
    return rc;
}

/* nvcc's line for a call it runs untouched (runtime.py run()): "passthrough" with the first six
   arguments, or, with ``probe_source``, "probe"; written before the call, as the Python seat does. */
static void log_untouched(const struct table *t, int argc, char **argv, const char *probe_source) {
    char *what;
    if (probe_source) {
        what = json_string(probe_source);
    } else {
        what = dup_n("[", 1);
        for (int i = 1; i < argc && i <= 6; ++i) what = concat(concat(what, i > 1 ? ", " : ""), json_string(argv[i]));
        what = concat(what, "]");
    }
    size_t line_size = strlen(what) + 128;
    char *line = malloc(line_size);
    if (!line) fallback();
    int n = probe_source ? snprintf(line, line_size, "{\"action\": \"probe\", \"pid\": %ld, \"source\": %s}\n", (long)getpid(), what)
                         : snprintf(line, line_size, "{\"action\": \"passthrough\", \"argv\": %s, \"pid\": %ld}\n", what, (long)getpid());
    if (n < 0 || (size_t)n >= line_size || append_log(t, line, (size_t)n) != 0) fallback();
}

/* A call that is not one of the build's TUs (runtime.py run(), run_host()): the real tool with the
   same argv, untouched and uncached, in the Python seat's environment; nvcc's logged first
   (log_untouched), a host compiler's not at all. Returns its code. */
static int untouched(const struct table *t, int argc, char **argv, const char *probe_source) {
    const char *real = g_host ? real_compiler(t, tool_name()) : t->nvcc;
    if (!real || access(real, X_OK) != 0) fallback(); /* the Python seat says why */
    char **cmd = calloc((size_t)argc + 1, sizeof(char *));
    if (!cmd) fallback();
    cmd[0] = (char *)real;
    for (int i = 1; i < argc; ++i) cmd[i] = argv[i];
    if (!g_host) log_untouched(t, argc, argv, probe_source);
    struct rusage usage;
    int rc = spawn_wait(real, cmd, build_env(t, NULL, 0), &usage);
    if (rc == SPAWN_FAILED) {
        fprintf(stderr, "cuw seat: cannot start %s: %s\n", real, strerror(errno));
        return 1;
    }
    return rc;
}

/* Whether this program stands as the host seat: one binary is both seats (native.py links the
   host seat's file to the nvcc seat's), and the kernel's /proc/self/exe names the file it ran,
   whichever link (the shadow CUDA_HOME's bin/g++, CUDACXX) led there. Without /proc, the name it
   was run by: anything but nvcc is a host compiler's. */
static int host_seat(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return strcmp(tool_name(), "nvcc") != 0;
    exe[n] = 0;
    const char *slash = strrchr(exe, '/');
    return strcmp(slash ? slash + 1 : exe, HOST_SCRIPT) == 0;
}

int main(int argc, char **argv) {
    g_argv = argv;
    g_host = host_seat();
    if (argc == 2 && strcmp(argv[1], LOCALE_PROBE_ARG) == 0) { /* native.py _locale_lines, at install */
        const char *ctype = coerced_ctype(NULL);
        printf("%s\n", ctype ? ctype : "");
        return fflush(stdout) == 0 ? 0 : 1;
    }
    struct table t = {0};
    if (read_table(&t) != 0) fallback();
    /* Whether this seat partitions this tool's TUs (runtime.py: the link job's seat has no
       partition; a host seat on a lane that keeps every host source neither). */
    int partitions_here = t.partitioned && (!g_host || t.host_partitioned);
    if (!partitions_here && !t.compile) fallback(); /* nothing this program could do itself */
    /* Beside the source filter the table leaves the filter's keys out: it may stub the rest
       when the filter's shard is the table's. Otherwise the Python seat refuses, and says why. */
    const char *f_index = getenv(FILTER_INDEX_VAR), *f_count = getenv(FILTER_COUNT_VAR);
    if (partitions_here && (f_index || f_count)) {
        char filtered[64];
        if (!t.source_filter || !f_index || !f_count ||
            snprintf(filtered, sizeof filtered, "%s/%s", f_index, f_count) >= (int)sizeof filtered ||
            strcmp(filtered, t.source_filter) != 0)
            fallback();
    }
    char tool[256];
    if (g_host && (snprintf(tool, sizeof tool, " %s ", tool_name()) >= (int)sizeof tool || !strstr(t.host_tools, tool)))
        fallback(); /* a name without a real compiler: the Python seat says so */

    /* cuw/toolchain/nvcc_args.py parse() */
    const char *const *value_options = g_host ? HOST_VALUE_OPTIONS : NVCC_VALUE_OPTIONS;
    const char *output = NULL, *depfile = NULL, *source = NULL;
    int sources = 0, compile = 0, not_compile = 0, depfile_with_compile = 0, after_unknown = 0;
    for (int i = 1; i < argc; ++i) {
        int follows_unknown = after_unknown;
        after_unknown = 0;
        const char *arg = argv[i];
        size_t name_len = strlen(arg);
        const char *value = NULL;
        const char *eq = arg[0] == '-' ? strchr(arg, '=') : NULL;
        if (eq) {
            name_len = (size_t)(eq - arg);
            value = eq + 1;
        }
        const char *name = arg;
        if (arg[0] == '@' || in_list(name, name_len, DEFER_OPTIONS)) fallback();
        int is_value_option = in_list(name, name_len, value_options);
        if (is_value_option && !value) {
            value = i + 1 < argc ? argv[i + 1] : NULL;
            ++i;
        } else if (name_len >= 2 && name[0] == '-' && name[1] == 'o' && !is_value_option &&
                   !(name_len == 8 && memcmp(name, "-objtemp", 8) == 0)) {
            /* -oFILE: the output file. */
            value = dup_n(name + 2, name_len - 2);
            name = "-o";
            name_len = 2;
        }
        if (in_list(name, name_len, (const char *const[]){"-o", "--output-file", NULL})) {
            output = value;
        } else if (in_list(name, name_len, (const char *const[]){"-MF", "--dependency-output", NULL})) {
            depfile = value;
        } else if (name[0] == '-' && !(name_len == 1)) {
            compile |= in_list(name, name_len, COMPILE_FLAGS);
            not_compile |= in_list(name, name_len, NOT_A_COMPILE);
            depfile_with_compile |= in_list(name, name_len, DEPFILE_WITH_COMPILE);
            after_unknown = !known_flag(name, name_len, value != NULL);
        } else if (is_source(arg)) {
            if (follows_unknown) fallback();
            source = arg;
            ++sources;
        }
    }
    /* Not a compile of a source (--version, -E, a link, CMake's compiler-id run): the real tool. */
    if (!compile || not_compile || sources == 0) return untouched(&t, argc, argv, NULL);
    if (sources != 1) fallback();
    if (!output) {
        const char *slash = strrchr(source, '/');
        output = concat(strip_ext(slash ? slash + 1 : source), ".o");
    }
    if (!depfile && depfile_with_compile) depfile = concat(strip_ext(output), ".d");
    if (!output[0]) fallback();

    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) fallback();
    /* A build-system probe: compiled for real, uncached. */
    if (probe(source, t.tree) || probe(output, t.tree) || probe(cwd, t.tree)) return untouched(&t, argc, argv, source);
    if (g_host) {
        /* nvcc's own intermediates (tmpxft files, the nameless ".c" of ggml's probe): never the
           build's TUs; run untouched, as the Python seat runs them. */
        const char *base = strrchr(source, '/');
        base = base ? base + 1 : source;
        const char *out_base = strrchr(output, '/');
        out_base = out_base ? out_base + 1 : output;
        if (strstr(source, "tmpxft") || strstr(out_base, "tmpxft") || in_list(base, strlen(base), SOURCE_SUFFIXES))
            return untouched(&t, argc, argv, NULL);
        if (strstr(output, "tmpxft") || base[0] == '.') fallback();
    }

    /* cuw/partition/rules.py tu_key(): the path relative to the source root, '/' separators. */
    if (((source[0] >= 'A' && source[0] <= 'Z') || (source[0] >= 'a' && source[0] <= 'z')) && source[1] == ':' &&
        (source[2] == '/' || source[2] == '\\'))
        fallback(); /* a Windows path: tu_key reads it with ntpath */
    if (source[0] == '\\' && source[1] == '\\') fallback();
    const char *abs = abspath(source, cwd);
    size_t root_len = strlen(t.root);
    /* runtime.py _under(): a host source outside the source root is not the build's TU. */
    if (g_host && root_len > 1 && (strncmp(abs, t.root, root_len) != 0 || (abs[root_len] != '/' && abs[root_len])))
        return untouched(&t, argc, argv, NULL);
    if (strncmp(abs, t.root, root_len) != 0 || abs[root_len] != '/' || !abs[root_len + 1]) fallback();
    const char *key = abs + root_len + 1;
    if (strpbrk(key, "\t\n")) fallback(); /* the table's separators */
    const char *json_key = NULL;
    const char *owner = partitions_here ? find_key(t.keys, key, &json_key) : NULL;
    char *json_output = json_string(output);
    if (!owner) {
        /* Not another shard's: compiled here (cuw/seat/runtime.py _stub_or_compile), when the
           table says how and knows the key (a file generated after install: the Python seat). */
        if (!t.compile) fallback();
        if (partitions_here) {
            owner = find_key(t.owned, key, &json_key);
            if (!owner) fallback();
        } else {
            owner = "null";
            json_key = json_string(key);
        }
        if (t.has_deadline && (getenv(DEADLINE_AFTER_VAR) || now(CLOCK_REALTIME) >= t.deadline))
            fallback(); /* past the deadline (or the tests' count of compiles): the Python seat defers it */
        return compile_cached(&t, argc, argv, json_key, owner, json_output);
    }

    /* cuw/seat/runtime.py _stub(), then _log(). */
    size_t empty_size;
    char *empty = read_file(t.empty, &empty_size);
    if (!empty || make_parent_dirs(output, cwd) != 0 || write_file(output, empty, empty_size) != 0) fallback();
    if (depfile && depfile[0]) {
        size_t n = strlen(output);
        char *dep = malloc(2 * n + 3), *d = dep;
        if (!dep) fallback();
        for (const char *p = output; *p; ++p) {
            if (*p == ' ') *d++ = '\\';
            *d++ = *p;
        }
        *d++ = ':';
        *d++ = '\n';
        if (make_parent_dirs(depfile, cwd) != 0 || write_file(depfile, dep, (size_t)(d - dep)) != 0) fallback();
    }
    size_t line_size = strlen(json_key) + strlen(json_output) + strlen(owner) + 128;
    char *line = malloc(line_size);
    if (!line) fallback();
    int n = snprintf(line, line_size, "{\"action\": \"stubbed\", \"key\": %s, %s\"output\": %s, \"owner\": %s, \"pid\": %ld}\n",
                     json_key, g_host ? "\"kind\": \"host\", " : "", json_output, owner, (long)getpid());
    if (n < 0 || (size_t)n >= line_size || append_log(&t, line, (size_t)n) != 0) fallback();
    return 0;
}

#else /* _WIN32: the launcher */
/* Compiled once per seat there: SEAT_HOST 1 for the host seat's launcher, 0 for nvcc's. */
#ifndef SEAT_HOST
#define SEAT_HOST 0
#endif
#define WIN32_LEAN_AND_MEAN
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
#include <windows.h>

static void fail(const wchar_t *what, const wchar_t *name) {
    fwprintf(stderr, L"cuw seat: %ls %ls (error %lu)\n", what, name ? name : L"", (unsigned long)GetLastError());
    exit(127);
}

/* A UTF-8 string (the compiled-in seat folder, the script's #! line) as UTF-16; the ANSI code
 * page when it is not UTF-8 (a script written in the locale's encoding). */
static wchar_t *widen(const char *s, int n) {
    UINT page = CP_UTF8;
    int size = MultiByteToWideChar(page, MB_ERR_INVALID_CHARS, s, n, NULL, 0);
    if (size <= 0) {
        page = CP_ACP;
        size = MultiByteToWideChar(page, 0, s, n, NULL, 0);
    }
    wchar_t *out = calloc((size_t)size + 1, sizeof(wchar_t));
    if (!out || MultiByteToWideChar(page, 0, s, n, out, size) != size) fail(L"cannot decode", NULL);
    out[size] = 0;
    return out;
}

/* The tool this program stands for: nvcc, or (the host seat) its own file name without .exe. */
static wchar_t *tool_name(void) {
    if (!SEAT_HOST) return L"nvcc";
    static wchar_t self[32768];
    DWORD n = GetModuleFileNameW(NULL, self, 32768);
    if (n == 0 || n >= 32768) fail(L"cannot read its own name", NULL);
    wchar_t *base = self;
    for (wchar_t *p = self; *p; ++p)
        if (*p == L'\\' || *p == L'/') base = p + 1;
    size_t len = wcslen(base);
    if (len > 4 && _wcsicmp(base + len - 4, L".exe") == 0) base[len - 4] = 0;
    return base;
}

static int is_file(const wchar_t *path) {
    DWORD attrs = GetFileAttributesW(path);
    return attrs != INVALID_FILE_ATTRIBUTES && !(attrs & FILE_ATTRIBUTE_DIRECTORY);
}

/* The script's "#!interpreter options" line: the interpreter is quoted, or it is the shortest
 * prefix that names a file (C:\Program Files\Python311\python.exe -IS, as cuw/seat/runtime.py writes it). */
static void read_shebang(const wchar_t *script, wchar_t **interpreter, wchar_t **options) {
    FILE *fh = _wfopen(script, L"rb");
    if (!fh) fail(L"cannot open", script);
    char line[8192];
    if (!fgets(line, sizeof line, fh) || strncmp(line, "#!", 2) != 0) fail(L"no #! line in", script);
    fclose(fh);
    line[strcspn(line, "\r\n")] = 0;
    wchar_t *text = widen(line + 2, -1);
    while (*text == L' ' || *text == L'\t') ++text;
    if (*text == L'"') {
        wchar_t *end = wcschr(text + 1, L'"');
        if (!end) fail(L"unbalanced quote on the #! line of", script);
        *end = 0;
        *interpreter = text + 1;
        *options = end + 1;
        return;
    }
    for (wchar_t *p = text;; ++p) {
        if (*p == 0 || *p == L' ' || *p == L'\t') {
            wchar_t keep = *p;
            *p = 0;
            if (is_file(text)) {
                *interpreter = text;
                *options = keep ? p + 1 : p;
                return;
            }
            *p = keep;
            if (!keep) break;
        }
    }
    fail(L"no interpreter found on the #! line of", script);
}

/* This program's command line after its own name (CommandLineToArgvW's rule for argv[0]). */
static const wchar_t *own_arguments(void) {
    const wchar_t *p = GetCommandLineW();
    if (*p == L'"') {
        for (++p; *p && *p != L'"'; ++p) {
        }
        if (*p) ++p;
    } else {
        while (*p && *p != L' ' && *p != L'\t') ++p;
    }
    return p; /* starts with the separating blank, or is empty */
}

static BOOL WINAPI ignore_ctrl(DWORD event) {
    (void)event;
    return TRUE; /* the child gets Ctrl-C too and decides; this program waits for it */
}

int main(void) {
    if (getenv("CUW_SEAT_STUB_NO_FALLBACK")) return NO_FALLBACK_EXIT; /* handles nothing itself */
    wchar_t *folder = widen(PYTHON_DIR, -1);
    for (wchar_t *p = folder; *p; ++p)
        if (*p == L'/') *p = L'\\'; /* SEAT_DIR "/python": one separator throughout */
    wchar_t *tool = tool_name();
    size_t script_len = wcslen(folder) + wcslen(tool) + 2;
    wchar_t *script = malloc(script_len * sizeof(wchar_t));
    if (!script) fail(L"out of memory", NULL);
    swprintf(script, script_len, L"%ls\\%ls", folder, tool);
    wchar_t *interpreter, *options;
    read_shebang(script, &interpreter, &options);
    const wchar_t *rest = own_arguments();
    size_t size = wcslen(interpreter) + wcslen(options) + wcslen(script) + wcslen(rest) + 16;
    wchar_t *cmdline = malloc(size * sizeof(wchar_t));
    if (!cmdline) fail(L"out of memory", NULL);
    swprintf(cmdline, size, L"\"%ls\" %ls \"%ls\"%ls", interpreter, options, script, rest);

    /* The child dies with this program (a killed build leaves no seat behind). */
    HANDLE job = CreateJobObjectW(NULL, NULL);
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION limits;
    memset(&limits, 0, sizeof limits);
    limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE | JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK;
    if (job) SetInformationJobObject(job, JobObjectExtendedLimitInformation, &limits, sizeof limits);
    SetConsoleCtrlHandler(ignore_ctrl, TRUE);

    STARTUPINFOW si;
    PROCESS_INFORMATION pi;
    memset(&si, 0, sizeof si);
    si.cb = sizeof si;
    si.dwFlags = STARTF_USESTDHANDLES;
    si.hStdInput = GetStdHandle(STD_INPUT_HANDLE);
    si.hStdOutput = GetStdHandle(STD_OUTPUT_HANDLE);
    si.hStdError = GetStdHandle(STD_ERROR_HANDLE);
    if (!CreateProcessW(interpreter, cmdline, NULL, NULL, TRUE, CREATE_SUSPENDED, NULL, NULL, &si, &pi))
        fail(L"cannot run", interpreter);
    if (job) AssignProcessToJobObject(job, pi.hProcess); /* before it can start anything */
    ResumeThread(pi.hThread);
    CloseHandle(pi.hThread);
    DWORD code = 127;
    if (WaitForSingleObject(pi.hProcess, INFINITE) != WAIT_OBJECT_0 || !GetExitCodeProcess(pi.hProcess, &code))
        fail(L"lost the child", interpreter);
    return (int)code;
}
#endif /* _WIN32 */
