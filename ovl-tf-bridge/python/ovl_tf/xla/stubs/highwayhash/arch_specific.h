#pragma once
// Stub: TensorFlow's pip package lacks highwayhash's headers; xla/printer.h names its hasher
// type in a class ovl never instantiates.
#define HH_TARGET_PREFERRED 0
