# A worker's memory does not grow with the prompts it is sent.  Prompts
# of 0.9 MB (under the default 1 MB body limit; completions with words,
# completions with one long word, chat) to a model of 512 tokens, with
# two workers: one of each at a time raises a worker's peak (VmHWM) by
# less than $Peak_bodies times the body; then 100, eight at a time,
# inline (kvserve_tokenize_threads off) and again through a 32-thread
# tokenize pool: each gets a 400 context_length_exceeded, and no
# worker's VmRSS ends more than %Grow_mb above what it was before them.
# Before the bound on the tokenizer's scratch and the early stop at the
# context, each pool thread kept a scratch as large as the largest prompt
# it had tokenized (tens of MB each), the inline path kept one per
# worker, and a single request peaked at some 24 times its body.
use Test::Nginx::Socket 'no_plan';
use FindBin;
use lib "$FindBin::Bin/lib";
use IO::Socket::INET ();
use JSON::PP ();
use POSIX ();

no_shuffle();
master_on();
workers(2);

our $Model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";

# what a worker may grow by over the 100 prompts: inline, its one
# scratch at its bound (1 MiB) and what malloc keeps after a request's
# trim (measured: 0-0.2 MB; 4-7 MB without the trim); in the pool, 32
# threads' first use (stacks, malloc arenas) and their scratches at the
# bound (measured: 6-9 MB; 15-21 without the trim).  On main, the
# unbounded scratch grew a worker by 21-24 MB inline, 290-340 MB in the
# pool.
our %Grow_mb = (inline => 8, pool => 32);

# what one 0.9 MB request may raise a worker's peak by, in bodies
our $Peak_bodies = 8;

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value('main_config', 'thread_pool kvs threads=32;')
        unless defined $block->main_config;
    $block->set_value('http_config',
        "kvserve_model kvserve-tiny $Model;\n"
        . "    kvserve_kv_cache 8m;\n    kvserve_threads 1;")
        unless defined $block->http_config;
    $block->set_value('config',
        "location /pool/v1/ { kvserve; kvserve_tokenize_threads kvs; }\n"
        . "location /inline/v1/ { kvserve; kvserve_tokenize_threads off; }")
        unless defined $block->config;
});

run_tests();

# --- on the nginx of the last block ------------------------------------------

my $port = $Test::Nginx::Util::ServerPortForClient;
my $json = JSON::PP->new->canonical;

sub slurp {
    my $f = shift;
    open my $fh, '<', $f or return undef;
    local $/;
    return scalar <$fh>;
}

# the worker processes of the master, by their title
sub worker_pids {
    my $master = slurp($Test::Nginx::Util::PidFile) // '';
    $master =~ s/\s+//g;
    my @pids;
    for my $stat (glob '/proc/[0-9]*/stat') {
        my $s = slurp($stat) or next;
        my ($pid, $state, $ppid) = $s =~ /^(\d+) \(.*\) (\S) (\d+)/ or next;
        next unless $ppid == $master && $state ne 'Z';
        my $cmd = slurp("/proc/$pid/cmdline") // '';
        push @pids, $pid if $cmd =~ /worker process/;
    }
    return sort { $a <=> $b } @pids;
}

sub rss_kb {
    my ($pid, $what) = @_;
    $what //= 'VmRSS';
    my ($kb) = (slurp("/proc/$pid/status") // '') =~ /^$what:\s+(\d+) kB/m;
    return $kb // 0;
}

# (status, body) of a whole response
sub post {
    my ($uri, $body) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 60)
        or return (0, "connect: $!");
    my $req = "POST $uri HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\nContent-Type: application/json\r\n"
        . "Content-Length: " . length($body) . "\r\n\r\n$body";
    my $off = 0;
    while ($off < length $req) {
        my $n = syswrite($s, $req, 1 << 20, $off);
        return (0, "write: $!") unless defined $n;
        $off += $n;
    }
    local $/;
    my $r = <$s> // '';
    close $s;
    my ($head, $rest) = split /\r\n\r\n/, $r, 2;
    my ($status) = ($head // '') =~ /^HTTP\/1\.1 (\d+)/;
    return ($status // 0, $rest // '');
}

# about $bytes bytes of English-like words, different for each seed
sub words {
    my ($bytes, $seed) = @_;
    my @w = qw(once upon a time there was a little girl named lily she
               liked to play in the park with her dog the sun was warm and
               happy one day they found a big red ball under a tree);
    my @parts;
    my ($len, $i) = (0, $seed);
    while ($len < $bytes) {
        my $word = $w[($i * 7 + $seed) % @w];
        push @parts, $word;
        $len += length($word) + 1;
        $i++;
    }
    return substr join(' ', @parts), 0, $bytes;
}

# the i-th body: three kinds in turn, each 0.9 MB of prompt
sub body {
    my $i = shift;
    my $bytes = int(0.9 * 1024 * 1024);
    my $kind = $i % 3;
    return ('/v1/completions', $json->encode({
                model => 'kvserve-tiny', prompt => words($bytes, $i),
                max_tokens => 4 })) if $kind == 0;
    # one piece of the pre-tokenizer: the BPE arrays' worst case
    return ('/v1/completions', $json->encode({
                model => 'kvserve-tiny',
                prompt => ('lily' x ($bytes / 4)) . $i, max_tokens => 4 }))
        if $kind == 1;
    return ('/v1/chat/completions', $json->encode({
                model => 'kvserve-tiny', max_tokens => 4,
                messages => [ { role => 'user',
                                content => words($bytes, $i) } ] }));
}

# 100 requests to $loc, $par at a time (forked clients); the count of
# answers that were a 400 context_length_exceeded, and the others
sub flood {
    my ($loc, $n, $par) = @_;
    my $file = "$Test::Nginx::Util::LogDir/flood.$$";
    my @kids;
    for my $k (0 .. $par - 1) {
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            open my $out, '>', "$file.$k" or POSIX::_exit(1);
            for (my $i = $k; $i < $n; $i += $par) {
                my ($uri, $body) = body($i);
                my ($st, $resp) = post("/$loc$uri", $body);
                my $ok = $st == 400
                    && $resp =~ /"code":"context_length_exceeded"/
                    && $resp =~ /maximum context length is 512 tokens/;
                print $out $ok ? "ok\n"
                               : "bad $i $uri: $st " . substr($resp, 0, 200)
                                 . "\n";
            }
            close $out;
            POSIX::_exit(0);
        }
        push @kids, $pid;
    }
    waitpid $_, 0 for @kids;
    my ($ok, @bad) = (0);
    for my $k (0 .. $par - 1) {
        for (split /\n/, slurp("$file.$k") // '') {
            if ($_ eq 'ok') { $ok++ } else { push @bad, $_ }
        }
        unlink "$file.$k";
    }
    return ($ok, @bad);
}

my @w = worker_pids();
is(scalar @w, 2, 'two workers');

# one small request each way first, so that what a worker holds for any
# request (the engine's socket, the pool's threads) is in the baseline
for my $loc (qw(pool inline)) {
    for (1 .. 4) {
        post("/$loc/v1/completions", $json->encode({
            model => 'kvserve-tiny', prompt => 'once upon a time',
            max_tokens => 1 }));
    }
}

# one request at a time first, inline: what a worker's peak rises by for
# one 0.9 MB request of each kind (the body, its copy, the JSON tree, the
# rendered chat text, the first ids), said as a multiple of the body
{
    my %before = map { $_ => rss_kb($_) } @w;
    my $body_kb = int(0.9 * 1024);
    for my $i (0 .. 2) {
        my ($uri, $body) = body($i);
        my ($st) = post("/inline$uri", $body);
        is($st, 400, "one 0.9 MB request ($uri, kind $i): 400");
    }
    my ($peak) = sort { $b <=> $a }
                 map { rss_kb($_, 'VmHWM') - $before{$_} } @w;
    diag("one 0.9 MB request at a time raised a worker's peak by $peak kB, "
         . sprintf('%.1f', $peak / $body_kb) . ' times the body');
    ok($peak < $Peak_bodies * $body_kb,
       "... less than $Peak_bodies times the body");
}

# inline first: a worker's own scratch, then the pool's 32 on top
for my $loc (qw(inline pool)) {
    my %before = map { $_ => rss_kb($_) } @w;
    my $grow = $Grow_mb{$loc};

    my ($ok, @bad) = flood($loc, 100, 8);
    is($ok, 100, "100 prompts of 0.9 MB via /$loc/: each a 400 "
       . 'context_length_exceeded') or diag(join "\n", @bad[0 .. 4]);

    for my $pid (@w) {
        my $kb = rss_kb($pid);
        diag("worker $pid: VmRSS $before{$pid} kB before /$loc/, $kb kB "
             . 'after, peak (VmHWM) ' . rss_kb($pid, 'VmHWM') . ' kB');
        ok($kb > 0 && $kb - $before{$pid} < $grow * 1024,
           "... worker $pid grew by less than $grow MB: by "
           . int(($kb - $before{$pid}) / 1024) . ' MB');
    }
}

is(join(" ", worker_pids()), join(' ', @w), 'the same workers at the end');

__DATA__

=== TEST 1: the location answers
--- request
POST /pool/v1/completions
{"model": "kvserve-tiny", "prompt": "once upon a time", "max_tokens": 1}
--- error_code: 200
