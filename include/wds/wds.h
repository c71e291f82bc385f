// Umbrella header for wds::core: #include <wds/wds.h>.
#pragma once

#include "wds/array.h"
#include "wds/buffer.h"
#include "wds/decode.h"
#include "wds/error.h"
#include "wds/io.h"
#include "wds/loader.h"
#include "wds/pipeline.h"
#include "wds/random.h"
#include "wds/sample.h"
#include "wds/shards.h"
#include "wds/stage.h"
#include "wds/tar.h"
#include "wds/tar_writer.h"
