sleep 0
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet18_cifar100_50e_1.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/xlnet_base_cased_2.rad
sleep 601
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/efficientNet_cifar100_20e_3.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/vgg2.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/mobilenet_cifar100_20e_3.rad
sleep 601
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/maskrcnn.rad
sleep 599
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/mobilenet_cifar100_20e_3.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/Xception3.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/efficientNet_cifar100_50e_2.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/xlnet_large_cased_2.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet34_cifar100_20e_2.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet2.rad
sleep 335
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/BERT_large.rad
sleep 265
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/mobilenet_cifar100_20e_2.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/mobilenet.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/vgg2.rad
sleep 238
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet.rad
sleep 125
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet34_cifar100_20e_1.rad
sleep 28
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet18_cifar100_20e_3.rad
sleep 213
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/dlrm.rad
sleep 596
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet34_cifar100_50e_1.rad
sleep 420
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet18_cifar100_20e_2.rad
sleep 110
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/maskrcnn.rad
sleep 69
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/Xception3.rad
sleep 149
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet18_cifar100_20e_1.rad
sleep 322
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/efficientNet2.rad
sleep 129
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/Xception2.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet18_cifar100_50e_3.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/efficientNet_cifar100_50e_2.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/UNet.rad
sleep 202
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/mobilenet3.rad
sleep 401
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet2.rad
sleep 597
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/mobilenet_cifar100_20e_2.rad
sleep 601
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/vgg3.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/Inception2.rad
sleep 816
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/vgg.rad
sleep 98
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/efficientNet_cifar100_50e_1.rad
sleep 286
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet18_cifar100_50e_3.rad
sleep 391
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/efficientNet2.rad
sleep 18
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/efficientNet_cifar100_20e_3.rad
sleep 191
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/gpt2_large_2.rad
sleep 102
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/efficientNet_cifar100_20e_2.rad
sleep 4
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/vgg3.rad
sleep 4
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/Xception2.rad
sleep 3
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet2.rad
sleep 4
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/efficientNet.rad
sleep 3
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet34_cifar100_20e_1.rad
sleep 3
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/vgg3.rad
sleep 4
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet18_cifar100_20e_2.rad
sleep 4
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet18_cifar100_20e_3.rad
sleep 3
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet18_cifar100_50e_1.rad
sleep 4
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/mobilenet2.rad
sleep 3
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/efficientNet_cifar100_20e_3.rad
sleep 3
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/BERT_base.rad
sleep 456
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/BERT_base.rad
sleep 183
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet34_cifar100_20e_3.rad
sleep 40
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/efficientNet_cifar100_50e_1.rad
sleep 35
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet18_cifar100_50e_1.rad
sleep 342
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/mobilenet_cifar100_20e_3.rad
sleep 600
python /home/ehyo/rad-scheduler/src/submit.py --task /home/ehyo/rad-scheduler/workloads/resnet2.rad
